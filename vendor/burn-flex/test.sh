#!/usr/bin/env bash
# Runs this patched burn-flex's unit tests (phalanx patch, see PHALANX.md): the crate is not a
# member of phalanx's workspace, and its realfft dev-dependency (used only by fft tests) is not
# in phalanx's offline cache, so the tests build from a scratch manifest that points at this
# src/, drops realfft (only the `fft` feature's tests use it; that feature stays off), and resolves
# with phalanx's lock file and cubecl-cuda patch.
# Usage: vendor/burn-flex/test.sh [TEST FILTER]   e.g. vendor/burn-flex/test.sh phalanx
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d /tmp/burn-flex-test.XXXX)
trap 'rm -rf "$scratch"' EXIT
ln -s "$here/src" "$scratch/src"
sed '/^\[dev-dependencies.realfft\]/,/^$/d' "$here/Cargo.toml" > "$scratch/Cargo.toml"
cat >> "$scratch/Cargo.toml" <<TOML

[workspace]

[patch.crates-io]
cubecl-cuda = { path = "$root/vendor/cubecl-cuda" }
TOML
cp "$root/Cargo.lock" "$scratch/Cargo.lock"
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target} \
  cargo test --offline --release --manifest-path "$scratch/Cargo.toml" --lib -- "${1:-phalanx}"
