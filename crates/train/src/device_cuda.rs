//! Probing the CUDA driver before Burn touches it.
//!
//! Burn's CUDA backend (cubecl-cuda over cudarc) loads the driver lazily and panics when it is
//! missing, deep in the first tensor operation. `phalanx train --device cuda` should instead
//! fail at once with a sentence, so the driver library is opened here first with `dlopen` and
//! asked `cuInit(0)` and `cuDeviceGetCount`: three calls whose errors come back as codes.
//! Compiled in every build (it needs only `dlopen`), so CI tests it without the `cuda` feature.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use std::{ffi::c_int, sync::OnceLock};

use libloading::{Library, Symbol};

/// The driver library names, in the order the loader tries them (the NVIDIA driver installs
/// `libcuda.so.1`; `libcuda.so` is the development link, or a stub on machines without a GPU).
const DRIVER_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// What the driver reported.
#[derive(Debug, Clone)]
pub(crate) struct Gpus {
    /// Number of visible devices (after `CUDA_VISIBLE_DEVICES`).
    pub(crate) count: usize,
    /// `libcuda.so.1, CUDA 13.0`.
    pub(crate) driver: String,
}

/// The driver's answer, probed once per process (`cuInit` is not cheap and its result does not
/// change).
pub(crate) fn probe() -> Result<Gpus, String> {
    static PROBED: OnceLock<Result<Gpus, String>> = OnceLock::new();
    PROBED.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> Result<Gpus, String> {
    let mut tried = Vec::new();
    let (name, lib) = DRIVER_NAMES
        .iter()
        .find_map(|name| {
            // SAFETY: loading the NVIDIA driver runs only its own initialisers.
            match unsafe { Library::new(name) } {
                Ok(lib) => Some((*name, lib)),
                Err(e) => {
                    tried.push(format!("{name} ({e})"));
                    None
                }
            }
        })
        .ok_or_else(|| {
            format!(
                "no CUDA driver: could not load {} — is this a machine with an NVIDIA GPU and \
                 its driver installed (nvidia-smi)?",
                tried.join(", ")
            )
        })?;
    type Init = unsafe extern "C" fn(u32) -> c_int;
    type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Version = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: the driver API's documented signatures (cuda.h): CUresult is an int enum.
    let (init, count, version): (Symbol<Init>, Symbol<Count>, Symbol<Version>) = unsafe {
        let sym = |s: &str| format!("{name} has no {s}: not a CUDA driver library");
        (
            lib.get(b"cuInit\0").map_err(|_| sym("cuInit"))?,
            lib.get(b"cuDeviceGetCount\0")
                .map_err(|_| sym("cuDeviceGetCount"))?,
            lib.get(b"cuDriverGetVersion\0")
                .map_err(|_| sym("cuDriverGetVersion"))?,
        )
    };
    // SAFETY: plain driver calls with valid out-pointers.
    let rc = unsafe { init(0) };
    if rc != 0 {
        return Err(format!(
            "the CUDA driver ({name}) failed cuInit: {} (error {rc}){}",
            result_name(rc),
            visible_devices_hint()
        ));
    }
    let mut v: c_int = 0;
    // SAFETY: as above.
    unsafe { version(&mut v) };
    let driver = format!("{name}, CUDA {}.{}", v / 1000, (v % 1000) / 10);
    let mut n: c_int = 0;
    // SAFETY: as above.
    let rc = unsafe { count(&mut n) };
    if rc != 0 || n <= 0 {
        return Err(format!(
            "the CUDA driver ({driver}) sees no GPU{}",
            visible_devices_hint()
        ));
    }
    // Keep the driver loaded: Burn opens it again, and unloading it under a live context is
    // undefined.
    std::mem::forget(lib);
    Ok(Gpus {
        count: n as usize,
        driver,
    })
}

/// NVRTC's library names, newest CUDA first (the toolkit's `lib64`, or PyTorch's
/// `nvidia/cu13/lib`, `nvidia/cuda_nvrtc/lib` wheels).
const NVRTC_NAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];

/// What Burn's CUDA backend needs besides the driver: it writes each kernel as CUDA C++ and
/// compiles it at run time with NVRTC, which includes the toolkit's headers. Missing, it panics
/// at the first kernel; here it is a sentence naming where it looked. `Ok` says what was found.
pub(crate) fn toolkit() -> Result<String, String> {
    let nvrtc = NVRTC_NAMES
        .iter()
        // SAFETY: loading NVRTC runs only its own initialisers.
        .find(|name| unsafe { Library::new(name) }.map(std::mem::forget).is_ok())
        .ok_or_else(|| {
            format!(
                "no NVRTC: could not load {} — Burn's CUDA backend compiles its kernels at run \
                 time; put the CUDA toolkit's lib64 (or PyTorch's site-packages/nvidia/cu13/lib) \
                 on LD_LIBRARY_PATH",
                NVRTC_NAMES.join(", ")
            )
        })?;
    let headers = cuda_include_dir().ok_or_else(|| {
        "no CUDA headers: Burn's CUDA backend compiles kernels with NVRTC against the CUDA \
         toolkit's include/ (looked in $CUDA_PATH, /usr/local/cuda, /opt/cuda, /usr): install \
         the toolkit or set CUDA_PATH"
            .to_string()
    })?;
    Ok(format!("{nvrtc}, headers in {}", headers.display()))
}

/// Where cubecl-cuda looks for the toolkit (its `install::cuda_path`), then `include/`.
fn cuda_include_dir() -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let root = match std::env::var_os("CUDA_PATH") {
        Some(p) => PathBuf::from(p),
        None if Path::new("/usr/local/cuda").exists() => PathBuf::from("/usr/local/cuda"),
        None if Path::new("/opt/cuda").exists() => PathBuf::from("/opt/cuda"),
        None if Path::new("/usr/bin/nvcc").exists() => PathBuf::from("/usr"),
        None => return None,
    };
    let include = root.join("include");
    include.join("cuda.h").exists().then_some(include)
}

/// Names of the `CUresult` codes a probe can meet.
fn result_name(rc: c_int) -> &'static str {
    match rc {
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY (the libcuda.so found is the toolkit's stub, not a driver)",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER (the driver is older than this CUDA)",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "a CUDA driver error",
    }
}

fn visible_devices_hint() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v:?})"),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On any machine: either GPUs, or an error that names what was looked for.
    #[test]
    fn probe_counts_gpus_or_says_what_is_missing() {
        match probe() {
            Ok(g) => assert!(g.count > 0 && g.driver.contains("CUDA"), "{g:?}"),
            Err(why) => assert!(
                why.contains("libcuda.so") || why.contains("CUDA driver"),
                "{why}"
            ),
        }
    }

    /// On any machine: NVRTC and headers, or an error naming what was looked for.
    #[test]
    fn toolkit_is_found_or_named() {
        match toolkit() {
            Ok(found) => assert!(found.contains("libnvrtc") && found.contains("include")),
            Err(why) => assert!(
                why.contains("NVRTC") || why.contains("CUDA headers"),
                "{why}"
            ),
        }
    }

    #[test]
    fn names_the_stub_library() {
        assert!(result_name(34).contains("stub"));
        assert_eq!(result_name(100), "CUDA_ERROR_NO_DEVICE");
    }
}
