//! `phalanx bench allreduce`: nccl-tests' allreduce table (size, count, dtype, time, algbw,
//! busbw) for every size, medians over `--iters` timed iterations, slowest rank reported.
//! busbw = algbw × 2(n−1)/n, the bandwidth each link needs for a ring to reach that time.

use std::{process::ExitCode, time::Instant};

use anyhow::bail;
use half::{bf16, f16};
use phalanx_core::{DType, Element, ReduceOp};
use phalanx_pg::{Backend, ProcessGroup};

use crate::cmd::sizes::{format_size, parse_sizes};

/// Flags of `phalanx bench allreduce`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    launch: phalanx_launch::LaunchArgs,
    /// Message sizes in bytes: `4K,64K,1M` or a range `4K..256M` (×2) / `4K..256M:4` (×4).
    #[arg(long, default_value = "4K..256M:4")]
    sizes: String,
    /// Element type: f32, f64, bf16, f16, i32, i64.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Reduce op.
    #[arg(long, default_value = "sum")]
    op: ReduceOp,
    /// Timed iterations per size (the median is reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Untimed iterations per size before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Verify every element of the result on every rank; fail loudly on any difference.
    #[arg(long)]
    check: bool,
    /// One JSON object per size instead of the table.
    #[arg(long)]
    json: bool,
    /// Process-group backend: `native`, `mpi` (under `mpirun -np N`; see `phalanx train`), or
    /// `nccl` (one GPU per rank: --nproc-per-node at most the GPUs of the node; docs/gpu.md).
    #[arg(long, default_value = "native", env = "PHALANX_BACKEND")]
    backend: Backend,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sizes = parse_sizes(&args.sizes)?;
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    if args.dtype == DType::U8 {
        bail!("--dtype u8 is not a reducible type; use f32, f64, bf16, f16, i32 or i64");
    }
    crate::cmd::train_setup::check_backend(args.backend)?;
    if args.backend != Backend::Mpi && !phalanx_launch::started_by_launcher() {
        return phalanx_launch::relaunch_self(&args.launch);
    }
    let pg = crate::cmd::train_setup::join_group(args.backend)?;
    if pg.rank() == 0 && !args.json {
        println!(
            "# phalanx bench allreduce: {} ranks, backend {}, op {}, {} iters (median), warmup {}",
            pg.world_size(),
            args.backend,
            args.op,
            args.iters,
            args.warmup
        );
        println!(
            "{:>10} {:>12} {:>6} {:>12} {:>12} {:>12} {:>6}",
            "size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check"
        );
    }
    let mut failed = false;
    for bytes in sizes {
        let row = match args.dtype {
            DType::F32 => measure::<f32>(&pg, bytes, &args),
            DType::F64 => measure::<f64>(&pg, bytes, &args),
            DType::BF16 => measure::<bf16>(&pg, bytes, &args),
            DType::F16 => measure::<f16>(&pg, bytes, &args),
            DType::I32 => measure::<i32>(&pg, bytes, &args),
            DType::I64 => measure::<i64>(&pg, bytes, &args),
            DType::U8 => unreachable!("refused above"),
        }?;
        failed |= row.check == Some(false);
        if pg.rank() == 0 {
            row.print(&args, pg.world_size());
        }
    }
    if failed {
        bail!("--check found wrong results (see the check column)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One message size's measurement.
struct Row {
    bytes: usize,
    count: usize,
    median_s: f64,
    check: Option<bool>,
}

/// A `--json` line (nccl-tests' columns).
#[derive(serde::Serialize)]
struct JsonRow {
    op: &'static str,
    world: usize,
    bytes: usize,
    dtype: String,
    median_s: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    check: &'static str,
    backend: &'static str,
}

impl Row {
    fn print(&self, args: &Args, world: usize) {
        let algbw = if self.median_s > 0.0 {
            self.bytes as f64 / self.median_s / 1e9
        } else {
            0.0
        };
        let busbw = algbw * 2.0 * (world as f64 - 1.0) / world as f64;
        let check = match self.check {
            None => "-",
            Some(true) => "ok",
            Some(false) => "FAIL",
        };
        if args.json {
            let row = JsonRow {
                op: "allreduce",
                world,
                bytes: self.bytes,
                dtype: args.dtype.to_string(),
                median_s: self.median_s,
                algbw_gbps: algbw,
                busbw_gbps: busbw,
                check,
                backend: args.backend.name(),
            };
            println!("{}", serde_json::to_string(&row).expect("a row serialises"));
        } else {
            println!(
                "{:>10} {:>12} {:>6} {:>12.2} {:>12.3} {:>12.3} {:>6}",
                format_size(self.bytes),
                self.count,
                args.dtype.name(),
                self.median_s * 1e6,
                algbw,
                busbw,
                check
            );
        }
    }
}

/// Small integers, so that sums over ranks are exact in every dtype (bf16 included).
fn fill<T: Element>(buf: &mut [T], rank: usize) {
    for (i, v) in buf.iter_mut().enumerate() {
        *v = T::from_f64(((rank + 1) + i % 7) as f64);
    }
}

fn measure<T: Element>(pg: &ProcessGroup, bytes: usize, args: &Args) -> anyhow::Result<Row> {
    let count = bytes / T::DTYPE.size();
    let mut buf = vec![T::zeroed(); count];
    fill(&mut buf, pg.rank());
    for _ in 0..args.warmup {
        pg.allreduce(&mut buf, args.op)?;
    }
    let mut times = Vec::with_capacity(args.iters);
    for _ in 0..args.iters {
        let t = Instant::now();
        pg.allreduce(&mut buf, args.op)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    // Report the slowest rank's median: a collective is as fast as its slowest member.
    let mut median = [times[times.len() / 2]];
    pg.allreduce(&mut median, ReduceOp::Max)?;
    let check = if args.check {
        fill(&mut buf, pg.rank());
        pg.allreduce(&mut buf, args.op)?;
        let ok = verify(&buf, pg.world_size(), args.op);
        let mut bad = [i32::from(!ok)];
        pg.allreduce(&mut bad, ReduceOp::Max)?;
        if !ok {
            eprintln!(
                "rank {}: wrong allreduce result at {bytes} bytes",
                pg.rank()
            );
        }
        Some(bad[0] == 0)
    } else {
        None
    };
    Ok(Row {
        bytes: count * T::DTYPE.size(),
        count,
        median_s: median[0],
        check,
    })
}

fn verify<T: Element>(buf: &[T], world: usize, op: ReduceOp) -> bool {
    buf.iter().enumerate().all(|(i, v)| {
        let vals = (0..world).map(|r| ((r + 1) + i % 7) as f64);
        let want = match op {
            ReduceOp::Sum => vals.sum::<f64>(),
            ReduceOp::Avg => T::from_f64(vals.sum::<f64>()).div_world(world).to_f64(),
            ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
            ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Product => T::from_f64(vals.product::<f64>()).to_f64(),
        };
        v.to_f64() == T::from_f64(want).to_f64()
    })
}
