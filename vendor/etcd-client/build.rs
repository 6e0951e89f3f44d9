//! The gRPC modules are checked in (`src/rpc/generated/`), so a build needs no `protoc`.
//! `--features regenerate-protos` writes them again from `proto/` (and needs `protoc`).

fn main() {
    #[cfg(feature = "regenerate-protos")]
    regenerate();
}

#[cfg(feature = "regenerate-protos")]
fn regenerate() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");
    tonic_prost_build::configure()
        .build_server(cfg!(feature = "build-server"))
        .out_dir("src/rpc/generated")
        .compile_protos(
            &[
                "proto/auth.proto",
                "proto/kv.proto",
                "proto/rpc.proto",
                "proto/v3election.proto",
                "proto/v3lock.proto",
            ],
            &[proto_root],
        )
        .expect("Failed to compile proto files");
}
