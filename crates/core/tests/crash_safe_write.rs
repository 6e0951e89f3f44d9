//! A writer SIGKILLed between its write and its rename leaves the previous file whole and
//! readable (Note [Crash-safe write] in `phalanx_core::file`). The writer is this test binary
//! again, in a child process, so the kill is a real one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "PHALANX_TEST_CRASH_WRITER";

/// In the child: write the new contents, say so, and wait to be killed before the rename.
fn child(path: &Path) -> ! {
    let written = path.with_extension("written");
    let _ = phalanx_core::file::write_atomic_with(path, |file| {
        file.write_all(&vec![b'n'; 1 << 20])?;
        file.sync_all()?;
        std::fs::write(&written, b"")?;
        std::thread::sleep(Duration::from_secs(120));
        Ok(())
    });
    // Only reached when the parent failed to kill us in two minutes.
    std::process::exit(3)
}

fn wait_for(path: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the writer exited ({status}) before writing");
        }
        assert!(
            Instant::now() < deadline,
            "the writer wrote nothing in 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_writer_killed_before_its_rename_leaves_the_previous_file() {
    if let Some(path) = std::env::var_os(CHILD) {
        child(Path::new(&path));
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("phalanx-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("step-000000000007.json");
    phalanx_core::file::write_atomic(&path, b"{\"previous\": true}").unwrap();

    let mut writer = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_writer_killed_before_its_rename_leaves_the_previous_file",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .spawn()
        .unwrap();
    wait_for(&path.with_extension("written"), &mut writer);
    writer.kill().unwrap(); // SIGKILL: no destructor, no cleanup runs
    let status = writer.wait().unwrap();
    assert!(!status.success());

    assert_eq!(std::fs::read(&path).unwrap(), b"{\"previous\": true}");
    // The killed writer's temporary file is still there, whole, under a hidden name that no
    // listing of finished files matches.
    let leftovers: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    assert!(
        leftovers[0].starts_with(".step-000000000007.json."),
        "{leftovers:?}"
    );
    // The next writer is not in its way.
    phalanx_core::file::write_atomic(&path, b"{\"next\": true}").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"next\": true}");
    std::fs::remove_dir_all(&dir).unwrap();
}
