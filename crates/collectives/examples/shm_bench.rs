//! Shared-memory allreduce benchmark, nccl-tests style: N ranks as processes on this host.
//!
//! ```text
//! cargo run --release -p phalanx-collectives --example shm_bench -- \
//!     [--ranks 2] [--sizes 4K,64K,1M,16M,64M,256M] [--buffer-bytes 2M] [--chunk 1M] [--small-max 32K] \
//!     [--spin-us 200] [--reps 5] [--check]
//! ```
//!
//! Prints per size the median over `reps` runs of the mean time per allreduce (f32, sum),
//! algorithm bandwidth (bytes / time) and bus bandwidth (algbw × 2(n-1)/n), the bus
//! bandwidth of the best run (what the algorithm does when no other process competes for
//! the cores), plus a memcpy baseline measured in the same run. `--check` verifies every size bitwise against a
//! sequential fold in the canonical order.

use std::{
    process::{Child, Command},
    time::{Duration, Instant},
};

use phalanx_collectives::{
    allreduce_shm_with, barrier_shm, kernels::reduce_into, segments, ShmOptions,
};
use phalanx_core::ReduceOp;
use phalanx_transport::shm::{ShmGroup, ShmSegment, DEFAULT_BUFFER_BYTES};

struct Args {
    ranks: usize,
    sizes: Vec<usize>,
    buffer_bytes: usize,
    small_max: usize,
    chunk: Option<usize>,
    spin: Option<Duration>,
    reps: usize,
    check: bool,
}

fn parse_size(s: &str) -> usize {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().expect("size") * mult
}

fn parse_args() -> Args {
    let mut a = Args {
        ranks: 2,
        sizes: "4K,16K,64K,256K,1M,4M,16M,64M,256M"
            .split(',')
            .map(parse_size)
            .collect(),
        buffer_bytes: DEFAULT_BUFFER_BYTES,
        small_max: ShmOptions::default().small_max_bytes,
        chunk: None,
        spin: None,
        reps: 5,
        check: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let val = || argv.get(i + 1).expect("flag needs a value").as_str();
        match argv[i].as_str() {
            "--ranks" => a.ranks = val().parse().expect("--ranks"),
            "--sizes" => a.sizes = val().split(',').map(parse_size).collect(),
            "--buffer-bytes" => a.buffer_bytes = parse_size(val()),
            "--small-max" => a.small_max = parse_size(val()),
            "--chunk" => a.chunk = Some(parse_size(val())),
            "--spin-us" => a.spin = Some(Duration::from_micros(val().parse().expect("--spin-us"))),
            "--reps" => a.reps = val().parse().expect("--reps"),
            "--check" => {
                a.check = true;
                i += 1;
                continue;
            }
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    a
}

fn input(rank: usize, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 7 + rank * 13) % 1001) as f32 / 1000.0 - 0.5 + rank as f32)
        .collect()
}

fn expected(world: usize, count: usize) -> Vec<f32> {
    let xs: Vec<Vec<f32>> = (0..world).map(|r| input(r, count)).collect();
    let mut out = vec![0f32; count];
    for s in 0..world {
        let seg = segments::segment(count, world, s);
        let mut order = segments::canonical_order(world, s);
        out[seg.clone()].copy_from_slice(&xs[order.next().unwrap()][seg.clone()]);
        for p in order {
            reduce_into(ReduceOp::Sum, &mut out[seg.clone()], &xs[p][seg.clone()]);
        }
    }
    out
}

/// Iterations per timed run: enough that a run lasts tens of milliseconds.
fn iters_for(bytes: usize) -> usize {
    ((256 << 20) / bytes.max(1)).clamp(3, 20_000)
}

fn join(job: &str, rank: usize, a: &Args) -> ShmGroup {
    let bytes = ShmGroup::segment_bytes(a.buffer_bytes);
    let own = ShmSegment::create(&format!("{job}-{rank}"), bytes).expect("create segment");
    let deadline = Instant::now() + Duration::from_secs(20);
    let peers = (0..a.ranks)
        .map(|p| {
            (p != rank).then(|| loop {
                match ShmSegment::open(&format!("{job}-{p}"), bytes) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() > deadline => panic!("rank {p} never appeared: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            })
        })
        .collect();
    let g = ShmGroup::new(rank, a.ranks, own, peers, Duration::from_secs(60)).expect("join");
    match a.spin {
        Some(s) => g.with_spin(s),
        None => g,
    }
}

fn run_rank(job: &str, rank: usize, a: &Args) {
    let mut g = join(job, rank, a);
    let opts = ShmOptions {
        small_max_bytes: a.small_max,
        chunk_bytes: a.chunk,
    };
    let n = a.ranks;
    let mut seq = 0u64;
    let mut next = || {
        seq += 1;
        seq
    };
    if rank == 0 {
        println!(
            "# phalanx shm allreduce: {n} ranks (processes), f32 sum, buffer {} KiB, chunk {} KiB, small path ≤ {} B",
            a.buffer_bytes >> 10,
            a.chunk.unwrap_or_else(|| phalanx_collectives::auto_chunk_bytes(n)).min(a.buffer_bytes) >> 10,
            a.small_max
        );
        println!("# memcpy 64 MiB, one thread: {:.2} GB/s", memcpy_gbs());
        println!(
            "{:>10} {:>11} {:>12} {:>9} {:>9} {:>10} {:>6}",
            "size", "count", "time(us)", "algbw", "busbw", "best busbw", "check"
        );
    }
    for &bytes in &a.sizes {
        let count = bytes / 4;
        let mut buf = input(rank, count);
        let iters = iters_for(bytes);
        let warm = (iters / 10).max(1);
        for _ in 0..warm {
            allreduce_shm_with(&mut g, next(), &mut buf, ReduceOp::Sum, &opts).unwrap();
        }
        let mut runs = Vec::with_capacity(a.reps);
        for _ in 0..a.reps {
            barrier_shm(&mut g, next()).unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                allreduce_shm_with(&mut g, next(), &mut buf, ReduceOp::Sum, &opts).unwrap();
            }
            runs.push(t.elapsed().as_secs_f64() / iters as f64);
        }
        runs.sort_by(f64::total_cmp);
        let (t, best) = (runs[runs.len() / 2], runs[0]);
        let check = if a.check {
            let mut v = input(rank, count);
            allreduce_shm_with(&mut g, next(), &mut v, ReduceOp::Sum, &opts).unwrap();
            let ok = bytemuck::cast_slice::<f32, u8>(&v)
                == bytemuck::cast_slice::<f32, u8>(&expected(n, count));
            assert!(ok, "rank {rank}: wrong result at {bytes} bytes");
            "ok"
        } else {
            "-"
        };
        if rank == 0 {
            let algbw = bytes as f64 / t / 1e9;
            let bus = 2.0 * (n - 1) as f64 / n as f64;
            println!(
                "{:>10} {:>11} {:>12.2} {:>9.3} {:>9.3} {:>10.3} {:>6}",
                bytes,
                count,
                t * 1e6,
                algbw,
                algbw * bus,
                bytes as f64 / best / 1e9 * bus,
                check
            );
        }
    }
    barrier_shm(&mut g, next()).unwrap();
}

fn memcpy_gbs() -> f64 {
    let src = vec![1u8; 64 << 20];
    let mut dst = vec![0u8; 64 << 20];
    dst.copy_from_slice(&src);
    let t = Instant::now();
    for _ in 0..4 {
        std::hint::black_box(&mut dst).copy_from_slice(std::hint::black_box(&src));
    }
    std::hint::black_box(&dst);
    (4 * src.len()) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let a = parse_args();
    if let (Ok(rank), Ok(job)) = (
        std::env::var("SHM_BENCH_RANK"),
        std::env::var("SHM_BENCH_JOB"),
    ) {
        run_rank(&job, rank.parse().expect("SHM_BENCH_RANK"), &a);
        return;
    }
    let job = format!("phalanx-shmbench-{}", std::process::id());
    let exe = std::env::current_exe().expect("current exe");
    let mut children: Vec<Child> = (1..a.ranks)
        .map(|r| {
            Command::new(&exe)
                .args(std::env::args().skip(1))
                .env("SHM_BENCH_RANK", r.to_string())
                .env("SHM_BENCH_JOB", &job)
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let result = std::panic::catch_unwind(|| run_rank(&job, 0, &a));
    for c in &mut children {
        if result.is_err() {
            let _ = c.kill();
        }
        let status = c.wait().expect("wait rank");
        assert!(
            status.success() || result.is_err(),
            "a rank failed: {status}"
        );
    }
    if result.is_err() {
        std::process::exit(1);
    }
}
