//! `phalanx doctor [launch flags]`: a preflight with the launch flags of the job. It launches
//! itself exactly like `phalanx launch` would launch the job (same store, same environment,
//! same `PHALANX_SOCKET_IFNAME`), and every rank reports the interface and address it would
//! use, which peers it reaches, each link's latency and bandwidth, shared memory and its clock
//! against rank 0. See docs/doctor.md.

mod args;
mod checks;
mod data;
mod link;
mod render;
mod report;
mod worker;

use std::process::ExitCode;

use anyhow::Context;

pub(crate) use args::Args;
use data::Report;

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if phalanx_launch::started_by_launcher() {
        return worker::run(&args);
    }
    // Launch ourselves in the hidden worker mode; local rank 0 of this node leaves the report
    // in a file that this process prints after the launcher returns (unprefixed, so that
    // `--json` is one parseable object).
    // The unique part is the folder: nodes compare their programs with paths reduced to file
    // names, and every node's program names `report.json`.
    let dir = std::env::temp_dir().join(format!(
        "phalanx-doctor-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("report.json");
    let exe = std::env::current_exe().context("finding the phalanx executable")?;
    let mut program = vec![
        exe.into_os_string(),
        "doctor".into(),
        "--report-file".into(),
        file.clone().into_os_string(),
    ];
    program.extend(std::env::args_os().skip(2));
    let code = phalanx_launch::launch(&args.launch, &program);
    let report = std::fs::read(&file);
    let _ = std::fs::remove_dir_all(&dir);
    let code = code?;
    let report: Report = match report {
        Ok(bytes) => serde_json::from_slice(&bytes).context("parsing the workers' report")?,
        Err(_) => {
            eprintln!("phalanx doctor: no report: the workers failed (see above)");
            return Ok(if code == ExitCode::SUCCESS {
                ExitCode::FAILURE
            } else {
                code
            });
        }
    };
    render::print(&report, args.json);
    Ok(if report.ok { code } else { ExitCode::FAILURE })
}
