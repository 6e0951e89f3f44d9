//! Deterministic fuzzing of checkpoint loading: `checkpoint::load` on 100,000+ mutated files —
//! the JSON metadata (the commit record) and the safetensors file (with its checksum fixed up,
//! so the safetensors parser itself is exercised). Nothing may panic or allocate more than a
//! small bound; anything loaded must be exactly what the files say.

use std::path::{Path, PathBuf};

use phalanx_checkpoint::{self as checkpoint, Checkpoint, Meta, NamedTensor, FORMAT};
use phalanx_testing::fuzz::{mutate, Rng, TrackingAlloc};
use sha2::{Digest, Sha256};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc::new();

fn sample() -> Checkpoint {
    Checkpoint {
        meta: Meta {
            format: FORMAT.into(),
            epoch: 1,
            step_in_epoch: 7,
            global_step: 42,
            samples_in_epoch: 448,
            seed: 0,
            world_size: 2,
            batch_size: 32,
            config: [("dataset".to_string(), "digits".to_string())].into(),
            tensors_sha256: String::new(),
            tensors_file: String::new(),
            sharded: None,
            linear_only: true,
        },
        tensors: vec![
            NamedTensor {
                name: "layers.0.weight".into(),
                shape: vec![2, 3],
                data: vec![0.5, -1.0, 2.0, 3.5, 0.0, 1e-3],
            },
            NamedTensor {
                name: "layers.0.bias".into(),
                shape: vec![2],
                data: vec![0.25, -0.25],
            },
        ],
        optim_state: Some(vec![3, 1, 4, 1, 5]),
    }
}

/// A scratch directory, in memory when the machine has one (100,000 small file writes);
/// removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!("phalanx-fuzz-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn mutated_checkpoints_are_refused_or_loaded_never_panic() {
    let dir = Scratch::new();
    let mut ck = sample();
    let meta_path = checkpoint::save(dir.path(), &mut ck, 3).unwrap();
    let json = std::fs::read(&meta_path).unwrap();
    let tensors_path = meta_path.with_file_name(&ck.meta.tensors_file);
    let tensors = std::fs::read(&tensors_path).unwrap();
    let original = checkpoint::load(&meta_path).unwrap();
    let mut rng = Rng::new(41);
    let (mut loaded, mut refused) = (0usize, 0usize);
    const CASES: usize = 100_000;
    ALLOC.reset();
    for case in 0..CASES {
        // Half the cases damage the metadata, half the tensors (re-signed so that the
        // checksum passes and the safetensors parser sees the damage).
        let (j, t) = if case % 2 == 0 {
            let mut j = json.clone();
            mutate(&mut rng, &mut j, 4096);
            (j, tensors.clone())
        } else {
            let mut t = tensors.clone();
            mutate(&mut rng, &mut t, 4096);
            let mut meta = ck.meta.clone();
            meta.tensors_sha256 = phalanx_core::hex::encode(&Sha256::digest(&t));
            (serde_json::to_vec(&meta).unwrap(), t)
        };
        std::fs::write(&meta_path, &j).unwrap();
        std::fs::write(&tensors_path, &t).unwrap();
        let r = std::panic::catch_unwind(|| checkpoint::load(&meta_path));
        match r {
            Ok(Ok(got)) => {
                loaded += 1;
                // Whatever loads agrees with the files: same digest, shapes that fit the data.
                assert_eq!(
                    got.meta.tensors_sha256,
                    phalanx_core::hex::encode(&Sha256::digest(&t))
                );
                for tensor in &got.tensors {
                    let n: usize = tensor.shape.iter().product();
                    assert_eq!(n, tensor.data.len(), "case {case}: {}", tensor.name);
                }
                if t == tensors {
                    assert_eq!(got.tensors, original.tensors);
                }
            }
            Ok(Err(e)) => {
                refused += 1;
                let text = e.to_string();
                assert!(
                    text.contains("phalanx-fuzz-checkpoint"),
                    "the error names the file: {text}"
                );
            }
            Err(_) => panic!(
                "case {case}: load panicked\nmetadata: {}\ntensors: {}",
                phalanx_core::hex::encode(&j),
                phalanx_core::hex::encode(&t)
            ),
        }
    }
    eprintln!("fuzz checkpoint: {CASES} inputs, {loaded} loaded, {refused} refused");
    assert!(refused > CASES / 2, "most damage is refused");
    assert!(
        loaded > 0,
        "some harmless mutations (JSON whitespace, float bits) load"
    );
    assert!(ALLOC.largest() < 1 << 20, "{} bytes", ALLOC.largest());
}
