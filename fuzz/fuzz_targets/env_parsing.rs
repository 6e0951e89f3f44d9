//! Environment parsing: `DistEnv::from_lookup` over variables taken from the input
//! (`NAME=value` separated by NUL), the Slurm helpers, and `parse_duration`.
#![no_main]
use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = phalanx_core::parse_duration(&text).map(|d| assert!(!d.is_zero()));
    let _ = phalanx_pg::first_host(&text);
    let _ = phalanx_pg::tasks_on_node(&text, data.len());
    let env: HashMap<String, String> = text
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(e) = phalanx_pg::DistEnv::from_lookup(&|k| env.get(k).cloned()) {
        assert!(e.rank < e.world_size && e.local_rank < e.local_world_size);
    }
});
