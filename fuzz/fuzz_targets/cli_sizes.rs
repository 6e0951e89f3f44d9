//! `phalanx bench allreduce --sizes` parsing (the CLI's own source, compiled in).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../crates/cli/src/cmd/sizes.rs"]
mod sizes;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(v) = sizes::parse_sizes(&text) {
        assert!(!v.is_empty() && v.len() <= 65 * text.split(',').count());
    }
});
