//! Turns features on in the compiler's host crates; it has no items.
//!
//! Note [One host build for the cuda lint]: proc macros and build scripts run in the compiler,
//! so cargo compiles them and their dependencies (syn, proc-macro2, serde_derive, darling, …)
//! in a build of their own, whose features it unifies over everything one `cargo` command
//! builds. The `cuda` feature's tree (cubecl's macros, bindgen, cudarc) turns on more of them
//! (`proc-macro2/span-locations`, syn's `fold`, derive_more's `eq`, …), and a host crate with
//! other features is another unit: CI's `cargo clippy --features …,cuda` compiled again most
//! of the host crates the main build had compiled minutes before, about 790 of its 1,650
//! CPU-seconds on 2 cores. This crate's dependencies turn those features on in every test build of
//! the workspace (it is a dependency of `phalanx-testing`, which every test build and the cuda
//! lint's test-mode check compile), so the lint (`CI_CUDA=1 .ci/run`, off by default: Note
//! [cuda in the tests' idle time] there), run in the main target folder, reuses the main
//! build's host crates: 151 of its 284 host units instead of 97 of 271 (`cargo --unit-graph`,
//! compared unit by unit with their dependencies, for the lint's earlier command, which also
//! took every target of phalanx-pg). What stays the lint's own is the `cuda`
//! tree's own crates and the build scripts of crates whose features `cuda` changes.
//!
//! It is not a workspace member (the root Cargo.toml excludes it): `cargo test --workspace`
//! would build a member as a root, and cargo applies a root proc macro's dependency features to
//! the linked crates as well, so the test programs would have had features a user's build of
//! `phalanx-cli` lacks (`serde/rc`, rustix's `net`, ...). Reached only as a dependency, its
//! features stay on the host side (resolver 2): the linked crates' features are what they were
//! without it (`cargo tree -e normal,dev,no-proc-macro -f '{p} [{f}]'`, compared).
//!
//! The list is the difference of the two unit graphs; a dependency update that changes it
//! costs CI time, not correctness. Turning a host feature on changes no program phalanx
//! builds (host crates are not linked into it), and the target's features are unified
//! separately (resolver 2).
