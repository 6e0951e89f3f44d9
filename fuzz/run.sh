#!/usr/bin/env bash
# Bounded coverage-guided fuzzing of every decoder target (cargo-fuzz, libFuzzer, AddressSanitizer).
# Usage: fuzz/run.sh [seconds per target, default $FUZZ_SECONDS or 10]
#        fuzz/run.sh --build   (install cargo-fuzz and build the targets only: .ci/run does this
#                               in the tests' idle time, then runs them)
# Needs a nightly toolchain (`rustup toolchain install nightly`); without one it says so and
# exits 0: the deterministic fuzz tests in `cargo test` (crates/*/tests/fuzz_*.rs) still run.
set -euo pipefail
cd "$(dirname "$0")"
build_only=0
if [ "${1:-}" = --build ]; then
  build_only=1
  shift
fi
secs="${1:-${FUZZ_SECONDS:-10}}"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: skipped: no nightly toolchain (cargo-fuzz needs -Zsanitizer); see docs/reliability.md"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz from crates.io"
  cargo install cargo-fuzz --locked --quiet
fi
cargo +nightly fuzz build -O
if [ "$build_only" = 1 ]; then
  exit 0
fi
targets=$(cargo +nightly fuzz list)
# One libFuzzer process per core at a time: each is single-threaded, so one at a time left a
# core idle (CI's fuzz phase ran at 50 % busy); two side by side on 2 cores each still gets a
# core for its $secs seconds. Each target's output goes to a file of its own, read in order.
jobs=$(nproc 2>/dev/null || echo 1)
outs=$(mktemp -d)
trap 'rm -rf "$outs"' EXIT
fuzz_one() { # target: run it; its output in $outs/target, its status in $outs/target.rc
  # -malloc_limit_mb: any single allocation over 64 MiB is a finding (lengths must be bounded
  # before allocating); -rss_limit_mb bounds the whole process.
  local rc=0
  cargo +nightly fuzz run -O "$1" -- -max_total_time="$secs" -rss_limit_mb=1024 \
    -malloc_limit_mb=64 -print_final_stats=1 >"$outs/$1" 2>&1 || rc=$?
  echo "$rc" >"$outs/$1.rc"
}
running=0
for t in $targets; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=0
for t in $targets; do
  if [ "$(cat "$outs/$t.rc" 2>/dev/null || echo 1)" != 0 ]; then
    tail -40 "$outs/$t"
    echo "fuzz: $t FAILED"
    failed=1
    continue
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$outs/$t")
  echo "fuzz: $t: ${runs:-?} inputs in ${secs} s, no crash"
done
exit "$failed"
