#!/usr/bin/env bash
# The GPU checks of issue #8, as ONE script for a lent GPU machine (docs/gpu.md).
#
#   bash gpu/check.sh            # results in $OUT (the device tool's folder) or ./gpu-out
#
# The binary: $PHALANX_BIN, else gpu/bin/phalanx(.zst|.gz) (built elsewhere and carried: the
# lent machines have no Rust toolchain and no network), else target/release/phalanx, else
# `cargo build --release -p phalanx-cli --features $PHALANX_FEATURES` (default `cuda,nccl`)
# when cargo is there.
#
# Steps (each with its own timeout; a step that cannot run says why and the rest go on):
#   1. what the machine has: GPU, driver, NCCL, NVRTC, which features the binary was built with
#   2. phalanx train on the CPU (the comparison), 1 rank
#   3. phalanx train --device cuda, 1 rank                       (needs the `cuda` feature)
#   4. phalanx train --device cuda:0, 2 ranks sharing the GPU    (host-side gradient reduction)
#   5. phalanx train --backend nccl (CPU model, gradients through NCCL on the GPU), 1 rank,
#      and with --device cuda (wide MLP)
#   6. phalanx bench allreduce --backend nccl --nproc-per-node 1, --check then timed
#   7. the same benchmark on the native backend, for comparison
#   0. (first, CHECK_DEVICE_BUCKETS=1, the default) device buckets: phalanx-ddp's CUDA unit test
#      ($PHALANX_DDP_TESTS or gpu/bin/ddp-tests.zst: the address handed to NCCL is the tensor's
#      memory), then the wide MLP under --backend nccl with --bucket-memory device and host
#      (the samples/s of the last epoch compared), then 2 ranks sharing the GPU under the native
#      backend with device buckets (pinned staging) and host buckets
# Each training runs twice: the seed recipe (tiny: launch-bound on a GPU) and a wide MLP.
# A multi-rank NCCL run needs one GPU per rank (NCCL refuses two ranks on one GPU): it is
# skipped on a machine with fewer than 2 GPUs, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
LOG="$OUT/check.log"
SUMMARY="$OUT/summary.md"
: >"$LOG"
: >"$OUT/tables.txt"
START=$(date +%s)
BUDGET_S="${CHECK_BUDGET_S:-480}" # stop starting new steps after this
# CHECK_SHAPES="seed wide" (the training shapes to run; "none" for none), CHECK_BENCH=1 (the
# allreduce benchmarks), CHECK_DEVICE_BUCKETS=1 (step 0).

say() { echo "$*" | tee -a "$LOG"; }
skip() { say "SKIPPED $1: $2"; echo "| $1 | skipped: $2 | | |" >>"$SUMMARY"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# --- the binary -------------------------------------------------------------------------------
BIN="${PHALANX_BIN:-}"
if [ -z "$BIN" ]; then
  if [ -f gpu/bin/phalanx.zst ] && command -v zstd >/dev/null; then
    BIN=/tmp/phalanx-gpu/phalanx; mkdir -p /tmp/phalanx-gpu; zstd -qdf gpu/bin/phalanx.zst -o "$BIN"
  elif [ -f gpu/bin/phalanx.gz ]; then
    BIN=/tmp/phalanx-gpu/phalanx; mkdir -p /tmp/phalanx-gpu; gzip -dc gpu/bin/phalanx.gz >"$BIN"
  elif [ -x gpu/bin/phalanx ]; then
    BIN=gpu/bin/phalanx
  elif [ -x target/release/phalanx ]; then
    BIN=target/release/phalanx
  elif command -v cargo >/dev/null; then
    say "building: cargo build --release -p phalanx-cli --features ${PHALANX_FEATURES:-cuda,nccl}"
    timeout 3000 cargo build --release -p phalanx-cli --features "${PHALANX_FEATURES:-cuda,nccl}" 2>&1 | tail -5 | tee -a "$LOG"
    BIN=target/release/phalanx
  else
    say "no phalanx binary (set PHALANX_BIN or carry gpu/bin/phalanx.zst) and no cargo to build one"
    exit 1
  fi
fi
chmod +x "$BIN" 2>/dev/null || true

# NVRTC (Burn's CUDA backend compiles its kernels at run time) and NCCL may sit in the CUDA
# toolkit or in PyTorch's nvidia-* wheels: put their directories on the loader's path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
if command -v python3 >/dev/null; then
  for d in $(timeout 20 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for lib in "$d"/nvidia/*/lib "$d"/nvidia/cu*/lib; do
      [ -d "$lib" ] && LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
    done
  done
fi
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

# --- 1. the machine -------------------------------------------------------------------------
{
  echo "# phalanx GPU check ($(date -u +%FT%TZ))"
  echo
  echo '```'
  (nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not found") | head -4
  echo "GPUs: $(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)"
  echo "binary: $BIN"
  echo "NCCL candidates: $(ls /usr/lib/x86_64-linux-gnu/libnccl.so* "$(dirname "$(timeout 20 python3 -c 'import nvidia.nccl, os; print(nvidia.nccl.__path__[0])' 2>/dev/null || echo /nonexistent)")"/lib/libnccl.so* 2>/dev/null | tr '\n' ' ')"
  echo "libnccl on disk: $(find /usr /opt -name 'libnccl.so*' 2>/dev/null | head -4 | tr '\n' ' ')"
  echo "NVRTC: $(for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d"/libnvrtc.so* 2>/dev/null; done | head -2 | tr '\n' ' ')"
  echo '```'
  echo
  echo "| step | result | samples/s (last epoch) | step time |"
  echo "| --- | --- | --- | --- |"
} >"$SUMMARY"
cat "$SUMMARY" >>"$LOG"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
GPUS=${GPUS:-0}

# Does the binary have the features? (Without them these flags fail naming the feature.)
HAS_CUDA=1; HAS_NCCL=1
probe=$(timeout 60 "$BIN" train --standalone --device cuda:4096 2>&1 || true)
case "$probe" in *"without the \`cuda\` feature"*) HAS_CUDA=0 ;; esac
say "probe --device cuda:4096: $(echo "$probe" | tail -1)"
probe=$(timeout 60 "$BIN" bench allreduce --backend nccl --nproc-per-node 1 --sizes 1K 2>&1 || true)
case "$probe" in *"without the \`nccl\` feature"*) HAS_NCCL=0 ;; esac
say "binary features: cuda=$HAS_CUDA nccl=$HAS_NCCL; GPUs: $GPUS"

# run NAME TIMEOUT ARGS...: one phalanx command; its summary line goes to the table.
run() {
  local name="$1" limit="$2"; shift 2
  if [ "$(left)" -lt 20 ]; then skip "$name" "out of time budget (${BUDGET_S}s)"; return 0; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  say "=== $name: $BIN $*"
  local t0 rc=0 out
  t0=$(date +%s.%N)
  out=$(timeout -k 5 "$limit" "$BIN" "$@" 2>&1) || rc=$?
  local dt; dt=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
  echo "$out" >>"$LOG"
  echo "$out" | tail -4
  case "$name" in bench*) { echo "## $name"; echo "$out" | grep -E "^\[rank 0\]: " | sed 's/^\[rank 0\]: //' || true; } >>"$OUT/tables.txt" ;; esac
  if [ "$rc" != 0 ]; then
    local why; why=$(echo "$out" | grep -E "error|Error" | tail -1 | cut -c1-200 || true)
    [ "$rc" = 124 ] && why="timed out after ${limit}s"
    echo "| $name | FAILED rc=$rc: ${why//|//} | | |" >>"$SUMMARY"
    return 0
  fi
  # train --json: the last epoch's {"samples_per_s":…} (steady state: the first epoch includes
  # NVRTC compiling every kernel), else rank 0's summary; the step time is batch×world / rate.
  local sps; sps=$(echo "$out" | grep '"event":"epoch"' | grep -o '"samples_per_s":[0-9.e+]*' | tail -1 | cut -d: -f2 || true)
  [ -z "$sps" ] && sps=$(echo "$out" | grep -o '"samples_per_s":[0-9.e+]*' | tail -1 | cut -d: -f2 || true)
  local digest; digest=$(echo "$out" | grep -o '"param_digest":"[0-9a-f]*"' | cut -d'"' -f4 | cut -c1-16 | sort -u | tr '\n' ' ' || true)
  local world; world=$(echo "$out" | grep -o '"world":[0-9]*' | tail -1 | cut -d: -f2 || true)
  if [ -n "$sps" ] && [ -n "$world" ]; then
    local ms; ms=$(awk "BEGIN{printf \"%.3f\", 1000 * $BATCH * $world / $sps}")
    echo "| $name | ok (${dt} s wall) params ${digest}| $sps | ${ms} ms |" >>"$SUMMARY"
  else
    echo "| $name | ok (${dt} s wall) params ${digest}| | |" >>"$SUMMARY"
  fi
}

# expect_fail NAME TIMEOUT PATTERN ARGS...: a command that must fail fast with a sentence.
expect_fail() {
  local name="$1" limit="$2" pattern="$3"; shift 3
  if [ "$(left)" -lt 20 ]; then skip "$name" "out of time budget (${BUDGET_S}s)"; return 0; fi
  say "=== $name (must fail): $BIN $*"
  local rc=0 out
  out=$(timeout -k 5 "$limit" "$BIN" "$@" 2>&1) || rc=$?
  echo "$out" >>"$LOG"
  local line; line=$(echo "$out" | grep -F -- "$pattern" | head -1 | cut -c1-220 || true)
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ -n "$line" ] && ! echo "$out" | grep -q panicked; then
    echo "| $name | refused as expected (rc=$rc): ${line//|//} | | |" >>"$SUMMARY"
  else
    echo "| $name | UNEXPECTED rc=$rc: $(echo "$out" | tail -1 | cut -c1-200) | | |" >>"$SUMMARY"
  fi
}

# Burn's CUDA backend compiles every kernel with NVRTC on first use and, by default, autotunes
# matmuls by compiling and timing candidates: minutes on a fresh machine. Minimal autotuning
# keeps the check inside its budget (kernels are cached on disk between the runs here).
export CUBECL_AUTOTUNE_LEVEL="${CUBECL_AUTOTUNE_LEVEL:-minimal}"
# --- 0. device buckets (Note [Device buckets] in phalanx-ddp) ---------------------------------
if [ "${CHECK_DEVICE_BUCKETS:-1}" = 1 ] && [ "$HAS_CUDA" = 1 ] && [ "$HAS_NCCL" = 1 ]; then
  TESTS="${PHALANX_DDP_TESTS:-}"
  if [ -z "$TESTS" ] && [ -f gpu/bin/ddp-tests.zst ] && command -v zstd >/dev/null; then
    TESTS=/tmp/phalanx-gpu/ddp-tests; mkdir -p /tmp/phalanx-gpu; zstd -qdf gpu/bin/ddp-tests.zst -o "$TESTS"
  elif [ -z "$TESTS" ] && [ -f gpu/bin/ddp-tests.gz ]; then
    TESTS=/tmp/phalanx-gpu/ddp-tests; mkdir -p /tmp/phalanx-gpu; gzip -dc gpu/bin/ddp-tests.gz >"$TESTS"
  fi
  if [ -n "$TESTS" ]; then
    chmod +x "$TESTS"
    say "=== device slice unit test: $TESTS cuda --nocapture"
    rc=0; out=$(timeout -k 5 120 "$TESTS" cuda --nocapture 2>&1) || rc=$?
    echo "$out" >>"$LOG"; echo "$out" | tail -4
    if [ "$rc" = 0 ] && echo "$out" | grep -q "test result: ok" && ! echo "$out" | grep -q "skipped:"; then
      echo "| phalanx-ddp CUDA unit tests (device address = tensor memory, Burn sees in-place writes; pinned staging round trip) | ok: $(echo "$out" | grep -o "[0-9]* passed" | tail -1) | | |" >>"$SUMMARY"
    else
      echo "| phalanx-ddp CUDA unit test | FAILED rc=$rc: $(echo "$out" | grep -E "panicked|skipped|error" | head -1 | cut -c1-200) | | |" >>"$SUMMARY"
    fi
  else
    skip "phalanx-ddp CUDA unit test" "no test binary (PHALANX_DDP_TESTS or gpu/bin/ddp-tests.zst)"
  fi
  # The wide MLP: 64 → 2048×4 → 10, batch 512/rank, 2 epochs of 25 steps; the last epoch is the
  # steady state (the first compiles every kernel; later runs find them cached on disk).
  BATCH=512
  W=(train --standalone --json --dataset synthetic:16384 --epochs 2 --batch-size 512 --hidden 2048 --depth 4)
  # CHECK_DEVICE_STEPS picks among: nccl (1 rank, in place vs host buckets), shared (2 ranks
  # sharing the GPU under the native backend: pinned staging vs host buckets).
  for what in ${CHECK_DEVICE_STEPS:-nccl shared}; do
    if [ "$what" = nccl ]; then
      PHALANX_DEBUG=INFO run "wide: cuda + nccl, 1 rank, device buckets (NCCL in place)" 300 "${W[@]}" --nproc-per-node 1 --device cuda --backend nccl --bucket-memory device
      run "wide: cuda + nccl, 1 rank, host buckets (staged through the host)" 180 "${W[@]}" --nproc-per-node 1 --device cuda --backend nccl --bucket-memory host
    else
      PHALANX_DEBUG=INFO run "wide: cuda:0, 2 ranks sharing it, native, device buckets (pinned staging)" 300 "${W[@]}" --nproc-per-node 2 --device cuda:0 --bucket-memory device
      run "wide: cuda:0, 2 ranks sharing it, native, host buckets" 180 "${W[@]}" --nproc-per-node 2 --device cuda:0 --bucket-memory host
    fi
  done
  grep -o 'bucket_memory="[^"]*"' "$LOG" | sort | uniq -c >>"$SUMMARY" || true
fi

for shape in ${CHECK_SHAPES:-seed wide}; do
  [ "$shape" = none ] && continue
  if [ "$shape" = seed ]; then
    # The seed recipe: 64 → 128 → 10 on the UCI digits, batch 8/rank.
    BATCH=8; ARGS=(--dataset digits --epochs 2 --batch-size 8)
  else
    # A wide MLP, where a GPU has work to do: 64 → 2048×4 → 10, batch 512/rank.
    BATCH=512; ARGS=(--dataset synthetic:16384 --epochs 1 --batch-size 512 --hidden 2048 --depth 4 --max-steps 24)
  fi
  T=(train --standalone --json "${ARGS[@]}")
  run "$shape: cpu, 1 rank" 150 "${T[@]}" --nproc-per-node 1 --device cpu
  if [ "$HAS_CUDA" = 1 ]; then
    run "$shape: cuda, 1 rank" 240 "${T[@]}" --nproc-per-node 1 --device cuda
    run "$shape: cuda:0, 2 ranks sharing it (host-side reduction)" 240 "${T[@]}" --nproc-per-node 2 --device cuda:0
  else
    skip "$shape: --device cuda" "binary built without the \`cuda\` feature"
    [ "$shape" = seed ] && expect_fail "--device cuda without the feature" 30 "\`cuda\` feature" "${T[@]}" --device cuda
  fi
  if [ "$HAS_NCCL" = 1 ]; then
    run "$shape: --backend nccl (CPU model), 1 rank" 150 "${T[@]}" --nproc-per-node 1 --backend nccl
    if [ "$HAS_CUDA" = 1 ] && [ "$shape" = wide ]; then
      run "$shape: cuda + --backend nccl, 1 rank" 150 "${T[@]}" --nproc-per-node 1 --device cuda --backend nccl
    fi
  fi
done

if [ "${CHECK_BENCH:-1}" != 1 ]; then
  skip "bench allreduce" "CHECK_BENCH=${CHECK_BENCH}"
elif [ "$HAS_NCCL" = 1 ]; then
  B=(bench allreduce --nproc-per-node 1 --sizes 4K,1M,64M --iters 20)
  for dt in f32 bf16 f64 i32 i64 f16; do
    run "bench allreduce nccl --check $dt" 60 "${B[@]}" --backend nccl --dtype "$dt" --check
  done
  # Which NCCL was loaded, and NCCL's own INFO lines (PHALANX_DEBUG maps onto NCCL_DEBUG).
  PHALANX_DEBUG=INFO run "bench allreduce nccl --check f32 (PHALANX_DEBUG=INFO)" 60 bench allreduce --nproc-per-node 1 --sizes 4K --backend nccl --check
  run "bench allreduce nccl (timed, 1 rank)" 90 "${B[@]}" --backend nccl
  # PyTorch's wheel, named explicitly: the log says which file was loaded.
  WHEEL=$(timeout 20 python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  if [ -n "$WHEEL" ] && [ -f "$WHEEL" ]; then
    PHALANX_NCCL_LIBRARY="$WHEEL" PHALANX_DEBUG=INFO run "bench allreduce nccl, PHALANX_NCCL_LIBRARY=$WHEEL" 60 bench allreduce --nproc-per-node 1 --sizes 1M --backend nccl --check
    grep -o "NCCL loaded library=[^ ]* version=[^ ]*" "$LOG" | sort | uniq -c | tee -a "$SUMMARY.loaded" >>"$LOG" || true
  else
    skip "PHALANX_NCCL_LIBRARY=<wheel>" "no nvidia-nccl wheel in python3's site-packages"
  fi
  PHALANX_NCCL_LIBRARY=/nonexistent/libnccl.so.2 expect_fail "PHALANX_NCCL_LIBRARY=/nonexistent" 30 "PHALANX_NCCL_LIBRARY=/nonexistent" bench allreduce --nproc-per-node 1 --backend nccl
  if [ "$GPUS" -lt 2 ]; then
    expect_fail "nccl, 2 ranks on $GPUS GPU" 60 "one rank on one GPU" train --standalone --nproc-per-node 2 --backend nccl --epochs 1
  fi
  if [ "$GPUS" -ge 2 ]; then
    run "bench allreduce nccl --check, 2 ranks" 90 bench allreduce --nproc-per-node 2 --sizes 4K,1M --backend nccl --check
  else
    skip "NCCL with 2+ ranks" "NCCL needs one GPU per rank; this machine has $GPUS GPU(s)"
  fi
else
  skip "--backend nccl" "binary built without the \`nccl\` feature"
fi
[ "${CHECK_BENCH:-1}" = 1 ] && run "bench allreduce native (timed, 1 rank)" 60 bench allreduce --nproc-per-node 1 --sizes 4K,1M,64M --iters 20

{
  echo
  echo "Allreduce tables (rank 0):"
  echo '```'
  cat "$OUT/tables.txt" 2>/dev/null || echo "(no benchmark ran)"
  echo '```'
  echo "NCCL files loaded (from PHALANX_DEBUG=INFO logs):"
  cat "$SUMMARY.loaded" 2>/dev/null || echo "(none logged)"
  echo "Total: $(($(date +%s) - START)) s"
} >>"$SUMMARY"
cat "$SUMMARY"
