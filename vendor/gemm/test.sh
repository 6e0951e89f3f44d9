#!/usr/bin/env bash
# Runs this patched gemm's unit tests (phalanx patch, see PHALANX.md) with and without its
# `complex` feature: with it, upstream's tests (complex ones included); without it, the real
# ones and `phalanx_complex_without_the_feature_panics`. The crate is not a member of
# phalanx's workspace, and of its dev-dependencies the unit tests use only rand and
# assert_approx_eq (the others serve its benchmarks), so the tests build from a scratch
# manifest that points at this src/ and keeps those two.
# Usage: vendor/gemm/test.sh [-- TEST FILTER]   e.g. vendor/gemm/test.sh -- phalanx
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d /tmp/gemm-test.XXXX)
trap 'rm -rf "$scratch"' EXIT
ln -s "$here/src" "$scratch/src"
# Everything up to the dev-dependencies, without the benchmark target, then the two the unit
# tests use.
sed -e '/^\[dev-dependencies/,$d' -e '/^\[\[bench\]\]/,/^$/d' "$here/Cargo.toml" > "$scratch/Cargo.toml"
cat >> "$scratch/Cargo.toml" <<TOML
[dev-dependencies]
rand = "0.8.5"
assert_approx_eq = "1.1.0"

[workspace]
TOML
# The versions the crate was published with.
cp "$here/Cargo.lock" "$scratch/Cargo.lock"
target=${CARGO_TARGET_DIR:-$root/target/gemm-test}
CARGO_TARGET_DIR=$target cargo test --release --manifest-path "$scratch/Cargo.toml" --lib "$@"
CARGO_TARGET_DIR=$target cargo test --release --manifest-path "$scratch/Cargo.toml" --lib \
  --no-default-features --features std,rayon,f16 "$@"
