//! `phalanx bench allreduce|broadcast|reduce|allgather|reduce_scatter|all_to_all`: nccl-tests'
//! table (size, count, dtype, time, algbw, busbw) for every size, medians over `--iters` timed
//! iterations, slowest rank reported. Sizes and busbw follow nccl-tests (and the anchors'
//! `mpi_coll_bench.c`): the size is the whole buffer (allreduce, broadcast, reduce), the
//! output (allgather), the input (reduce_scatter) or each rank's send buffer (all_to_all);
//! busbw = algbw × 2(n−1)/n for allreduce, × 1 for broadcast and reduce, × (n−1)/n for the
//! others: the bandwidth each link needs to reach that time.

use std::{process::ExitCode, time::Instant};

use anyhow::bail;
use half::{bf16, f16};
use phalanx_core::{DType, Element, ReduceOp};
use phalanx_pg::{BackendType, ProcessGroup};

use crate::cmd::sizes::{format_size, parse_sizes};

/// The collective a bench measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collective {
    Allreduce,
    Broadcast,
    Reduce,
    Allgather,
    ReduceScatter,
    AllToAll,
}

impl Collective {
    fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
        }
    }

    /// busbw / algbw (nccl-tests).
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::Allreduce => 2.0 * (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce => 1.0,
            Collective::Allgather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
        }
    }

    /// Whether it reduces (takes `--op`, refuses u8).
    fn reduces(self) -> bool {
        matches!(
            self,
            Collective::Allreduce | Collective::Reduce | Collective::ReduceScatter
        )
    }
}

/// Flags of `phalanx bench <collective>`.
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
    /// Reduce op (allreduce, reduce, reduce_scatter).
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
    backend: BackendType,
}

pub(crate) fn run(args: Args, coll: Collective) -> anyhow::Result<ExitCode> {
    let sizes = parse_sizes(&args.sizes)?;
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    if args.dtype == DType::U8 && coll.reduces() {
        bail!("--dtype u8 is not a reducible type; use f32, f64, bf16, f16, i32 or i64");
    }
    crate::cmd::train::setup::check_backend(args.backend)?;
    if args.backend != BackendType::Mpi && !phalanx_launch::started_by_launcher() {
        let mut launch = args.launch.clone();
        if args.json {
            // Plain JSON lines (`phalanx bench allreduce --json | jq .`); rank 0 prints them.
            launch
                .log_line_prefix_template
                .get_or_insert_with(String::new);
        }
        return phalanx_launch::relaunch_self(&launch);
    }
    let pg = crate::cmd::train::setup::join_group(args.backend)?;
    if pg.rank() == 0 && !args.json {
        println!(
            "# phalanx bench {}: {} ranks, backend {}, op {}, {} iters (median), warmup {}",
            coll.name(),
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
            DType::F32 => measure::<f32>(&pg, coll, bytes, &args),
            DType::F64 => measure::<f64>(&pg, coll, bytes, &args),
            DType::BF16 => measure::<bf16>(&pg, coll, bytes, &args),
            DType::F16 => measure::<f16>(&pg, coll, bytes, &args),
            DType::I32 => measure::<i32>(&pg, coll, bytes, &args),
            DType::I64 => measure::<i64>(&pg, coll, bytes, &args),
            DType::U8 => measure::<u8>(&pg, coll, bytes, &args),
        }?;
        failed |= row.check == Some(false);
        if pg.rank() == 0 {
            row.print(&args, coll, pg.world_size());
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
    fn print(&self, args: &Args, coll: Collective, world: usize) {
        let algbw = if self.median_s > 0.0 {
            self.bytes as f64 / self.median_s / 1e9
        } else {
            0.0
        };
        let busbw = algbw * coll.bus_factor(world);
        let check = match self.check {
            None => "-",
            Some(true) => "ok",
            Some(false) => "FAIL",
        };
        if args.json {
            let row = JsonRow {
                op: coll.name(),
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

/// Rank `rank`'s element `i`: small integers, so that sums over ranks are exact in every
/// dtype (bf16 included).
fn value(rank: usize, i: usize) -> f64 {
    ((rank + 1) + i % 7) as f64
}

fn fill<T: Element>(buf: &mut [T], rank: usize, offset: usize) {
    for (i, v) in buf.iter_mut().enumerate() {
        *v = T::from_f64(value(rank, offset + i));
    }
}

/// The buffers of one call: `send` and `recv` (empty where the collective works in place).
struct Buffers<T> {
    send: Vec<T>,
    recv: Vec<T>,
}

/// Element counts of the send and receive buffers for a message of `count` elements (the
/// nccl-tests size), rounded down to whole per-rank blocks where the collective needs them.
fn counts(coll: Collective, count: usize, n: usize) -> (usize, usize) {
    let per = count / n;
    match coll {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => (count, 0),
        Collective::Allgather => (per, per * n),
        Collective::ReduceScatter => (per * n, per),
        Collective::AllToAll => (per * n, per * n),
    }
}

fn call<T: Element>(
    pg: &ProcessGroup,
    coll: Collective,
    b: &mut Buffers<T>,
    op: ReduceOp,
) -> phalanx_pg::Result<()> {
    match coll {
        Collective::Allreduce => pg.allreduce(&mut b.send, op),
        Collective::Broadcast => pg.broadcast(&mut b.send, 0),
        Collective::Reduce => pg.reduce(&mut b.send, op, 0),
        Collective::Allgather => pg.allgather(&b.send, &mut b.recv),
        Collective::ReduceScatter => pg.reduce_scatter(&mut b.send, &mut b.recv, op),
        Collective::AllToAll => pg.all_to_all(&b.send, &mut b.recv),
    }
}

fn measure<T: Element>(
    pg: &ProcessGroup,
    coll: Collective,
    bytes: usize,
    args: &Args,
) -> anyhow::Result<Row> {
    let (n, r) = (pg.world_size(), pg.rank());
    let (send, recv) = counts(coll, bytes / T::DTYPE.size(), n);
    let mut b = Buffers {
        send: vec![T::zeroed(); send],
        recv: vec![T::zeroed(); recv],
    };
    fill(&mut b.send, r, 0);
    for _ in 0..args.warmup {
        call(pg, coll, &mut b, args.op)?;
    }
    let mut times = Vec::with_capacity(args.iters);
    for _ in 0..args.iters {
        let t = Instant::now();
        call(pg, coll, &mut b, args.op)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    // Report the slowest rank's median: a collective is as fast as its slowest member.
    let mut median = [times[times.len() / 2]];
    pg.allreduce(&mut median, ReduceOp::Max)?;
    let check = if args.check {
        fill(&mut b.send, r, 0);
        call(pg, coll, &mut b, args.op)?;
        let ok = verify(coll, &b, n, r, args.op);
        let mut bad = [i32::from(!ok)];
        pg.allreduce(&mut bad, ReduceOp::Max)?;
        if !ok {
            eprintln!("rank {r}: wrong {} result at {bytes} bytes", coll.name());
        }
        Some(bad[0] == 0)
    } else {
        None
    };
    // The nccl-tests size of what was measured (whole blocks).
    let size = match coll {
        Collective::Allgather => recv,
        _ => send,
    };
    Ok(Row {
        bytes: size * T::DTYPE.size(),
        count: size,
        median_s: median[0],
        check,
    })
}

/// Whether every element this rank holds is what `coll` must leave there.
fn verify<T: Element>(coll: Collective, b: &Buffers<T>, n: usize, r: usize, op: ReduceOp) -> bool {
    let same = |v: &T, want: f64| v.to_f64() == T::from_f64(want).to_f64();
    match coll {
        Collective::Allreduce => reduced(&b.send, 0, n, op),
        Collective::Reduce => r != 0 || reduced(&b.send, 0, n, op),
        Collective::ReduceScatter => reduced(&b.recv, r * b.recv.len(), n, op),
        Collective::Broadcast => b.send.iter().enumerate().all(|(i, v)| same(v, value(0, i))),
        Collective::Allgather => {
            let per = b.send.len();
            b.recv
                .iter()
                .enumerate()
                .all(|(g, v)| same(v, value(g / per.max(1), g % per.max(1))))
        }
        Collective::AllToAll => {
            // Block q came from rank q: its block r, elements r·per.. of its send buffer.
            let per = b.recv.len() / n;
            b.recv
                .iter()
                .enumerate()
                .all(|(g, v)| same(v, value(g / per.max(1), r * per + g % per.max(1))))
        }
    }
}

/// Whether `buf`, elements `offset..` of a reduction over `world` ranks, holds it.
fn reduced<T: Element>(buf: &[T], offset: usize, world: usize, op: ReduceOp) -> bool {
    buf.iter().enumerate().all(|(i, v)| {
        let vals = (0..world).map(|r| value(r, offset + i));
        let want = match op {
            ReduceOp::Sum => vals.sum::<f64>(),
            ReduceOp::Avg => T::from_f64(vals.sum::<f64>()).div_world(world).to_f64(),
            ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
            ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Product => T::from_f64(vals.product::<f64>()).to_f64(),
            ReduceOp::BAnd => vals.map(|v| v as i64).fold(-1, |a, b| a & b) as f64,
            ReduceOp::BOr => vals.map(|v| v as i64).fold(0, |a, b| a | b) as f64,
            ReduceOp::BXor => vals.map(|v| v as i64).fold(0, |a, b| a ^ b) as f64,
        };
        v.to_f64() == T::from_f64(want).to_f64()
    })
}
