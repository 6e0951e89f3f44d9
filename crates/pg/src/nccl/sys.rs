//! Loading NCCL and the CUDA driver at run time (`dlopen`), so that the `nccl` feature builds
//! on machines with no CUDA toolkit and a binary built with it runs (with the other backends)
//! on machines with no GPU.
//!
//! Note [Finding NCCL]: users have NCCL as Debian's `libnccl2` (`libnccl.so.2` in the loader's
//! path), as NVIDIA's tarball (anywhere, found through `LD_LIBRARY_PATH`), or as PyPI's
//! `nvidia-nccl-cu12`/`-cu13` wheels that PyTorch installs (`site-packages/nvidia/nccl/lib/
//! libnccl.so.2`, a directory no loader searches). cudarc's loader tries `libnccl.so` only,
//! which neither the Debian runtime package nor the wheels ship. The search here is:
//! `PHALANX_NCCL_LIBRARY` (a path; when set, nothing else is tried), `libnccl.so.2`,
//! `libnccl.so`, then `nvidia/{nccl,cu13,cu12}/lib/libnccl.so.2` under `$VIRTUAL_ENV`, `$CONDA_PREFIX`
//! and the site-packages that `python3` reports (one short subprocess, only when the loader
//! found nothing). The file loaded is logged at INFO (`PHALANX_DEBUG=INFO`).

use std::{
    ffi::{c_char, c_int, c_uint, c_void, CStr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use libloading::Library;
use phalanx_core::env;

/// `CUresult` / `ncclResult_t`: 0 is success.
pub(crate) type Status = c_int;
/// `CUdeviceptr`.
pub(crate) type DevicePtr = u64;
/// `CUcontext`, `CUstream`, `ncclComm_t`: opaque handles.
pub(crate) type Handle = *mut c_void;

/// `CUDA_ERROR_NOT_READY`: an asynchronous stream has work left.
pub(crate) const CUDA_ERROR_NOT_READY: Status = 600;
/// `ncclInProgress`: a non-blocking NCCL call has not finished.
pub(crate) const NCCL_IN_PROGRESS: Status = 7;

/// NCCL's `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UniqueId(pub(crate) [u8; 128]);

macro_rules! api {
    ($lib:ident: $( $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        /// Function pointers into the loaded library.
        #[allow(non_snake_case)]
        pub(crate) struct $lib {
            $( pub(crate) $name: unsafe extern "C" fn($($arg),*) -> $ret, )*
            /// The file the functions came from.
            pub(crate) path: String,
        }

        impl $lib {
            /// Resolves every function of `lib`; the library stays loaded for the process.
            fn resolve(lib: Library, path: String) -> Result<$lib, String> {
                // SAFETY: the signatures are those of the C headers (cuda.h, nccl.h).
                let api = unsafe {
                    $lib {
                        $( $name: *lib
                            .get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .map_err(|e| format!("{path} lacks {}: {e}", stringify!($name)))?, )*
                        path,
                    }
                };
                // Unloading a driver or NCCL under live contexts and comms is undefined.
                std::mem::forget(lib);
                Ok(api)
            }
        }
    };
}

api! { Driver:
    cuInit: fn(c_uint) -> Status;
    cuDriverGetVersion: fn(*mut c_int) -> Status;
    cuDeviceGetCount: fn(*mut c_int) -> Status;
    cuDeviceGet: fn(*mut c_int, c_int) -> Status;
    cuDeviceGetName: fn(*mut c_char, c_int, c_int) -> Status;
    cuDevicePrimaryCtxRetain: fn(*mut Handle, c_int) -> Status;
    cuCtxSetCurrent: fn(Handle) -> Status;
    cuStreamCreate: fn(*mut Handle, c_uint) -> Status;
    cuStreamQuery: fn(Handle) -> Status;
    cuStreamDestroy_v2: fn(Handle) -> Status;
    cuMemAlloc_v2: fn(*mut DevicePtr, usize) -> Status;
    cuMemFree_v2: fn(DevicePtr) -> Status;
    cuMemcpyHtoDAsync_v2: fn(DevicePtr, *const c_void, usize, Handle) -> Status;
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, DevicePtr, usize, Handle) -> Status;
    cuGetErrorName: fn(Status, *mut *const c_char) -> Status;
    cuPointerGetAttribute: fn(*mut c_void, c_int, DevicePtr) -> Status;
    cuMemHostAlloc: fn(*mut *mut c_void, usize, c_uint) -> Status;
    cuMemFreeHost: fn(*mut c_void) -> Status;
    cuMemcpyDtoH_v2: fn(*mut c_void, DevicePtr, usize) -> Status;
    cuMemcpyHtoD_v2: fn(DevicePtr, *const c_void, usize) -> Status;
}

api! { Nccl:
    ncclGetVersion: fn(*mut c_int) -> Status;
    ncclGetUniqueId: fn(*mut UniqueId) -> Status;
    ncclCommInitRank: fn(*mut Handle, c_int, UniqueId, c_int) -> Status;
    ncclCommDestroy: fn(Handle) -> Status;
    ncclCommAbort: fn(Handle) -> Status;
    ncclCommGetAsyncError: fn(Handle, *mut Status) -> Status;
    ncclGetErrorString: fn(Status) -> *const c_char;
    ncclAllReduce: fn(*const c_void, *mut c_void, usize, c_int, c_int, Handle, Handle) -> Status;
    ncclBroadcast: fn(*const c_void, *mut c_void, usize, c_int, c_int, Handle, Handle) -> Status;
    ncclAllGather: fn(*const c_void, *mut c_void, usize, c_int, Handle, Handle) -> Status;
    ncclReduceScatter: fn(*const c_void, *mut c_void, usize, c_int, c_int, Handle, Handle) -> Status;
}

impl Driver {
    /// `CUDA_ERROR_NO_DEVICE (100)`.
    pub(crate) fn error(&self, rc: Status) -> String {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName stores a static string or leaves the pointer null.
        unsafe { (self.cuGetErrorName)(rc, &mut name) };
        if name.is_null() {
            format!("CUDA error {rc}")
        } else {
            // SAFETY: a NUL-terminated static string from the driver.
            format!(
                "{} ({rc})",
                unsafe { CStr::from_ptr(name) }.to_string_lossy()
            )
        }
    }

    /// Turns a driver status into a `Result` naming the call.
    pub(crate) fn check(&self, call: &str, rc: Status) -> Result<(), String> {
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("{call} failed: {}", self.error(rc)))
        }
    }
}

impl Driver {
    /// `CUDA 13.0 (libcuda.so.1)`.
    pub(crate) fn version(&self) -> String {
        let mut v: c_int = 0;
        // SAFETY: a plain out-pointer.
        unsafe { (self.cuDriverGetVersion)(&mut v) };
        format!("CUDA {}.{} ({})", v / 1000, (v % 1000) / 10, self.path)
    }
}

impl Nccl {
    /// `unhandled cuda error (run with NCCL_DEBUG=INFO for details) (1)`.
    pub(crate) fn error(&self, rc: Status) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string.
        let s = unsafe { (self.ncclGetErrorString)(rc) };
        if s.is_null() {
            format!("NCCL error {rc}")
        } else {
            // SAFETY: as above.
            format!("{} ({rc})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
        }
    }

    /// Turns an NCCL status into a `Result` naming the call.
    pub(crate) fn check(&self, call: &str, rc: Status) -> Result<(), String> {
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("{call} failed: {}", self.error(rc)))
        }
    }

    /// `2.27.3`.
    pub(crate) fn version(&self) -> String {
        let mut v: c_int = 0;
        // SAFETY: a plain out-pointer.
        unsafe { (self.ncclGetVersion)(&mut v) };
        // NCCL ≥ 2.9 encodes major*10000 + minor*100 + patch.
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    }
}

/// The CUDA driver, loaded and initialised once per process.
pub(crate) fn driver() -> Result<&'static Driver, String> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(load_driver)
        .as_ref()
        .map_err(Clone::clone)
}

fn load_driver() -> Result<Driver, String> {
    let mut tried = Vec::new();
    for name in ["libcuda.so.1", "libcuda.so"] {
        // SAFETY: loading the NVIDIA driver runs only its own initialisers.
        match unsafe { Library::new(name) } {
            Ok(lib) => {
                let d = Driver::resolve(lib, name.to_string())?;
                // SAFETY: a plain driver call.
                let rc = unsafe { (d.cuInit)(0) };
                d.check("cuInit", rc)
                    .map_err(|e| format!("the CUDA driver ({name}): {e}"))?;
                return Ok(d);
            }
            Err(e) => tried.push(format!("{name} ({e})")),
        }
    }
    Err(format!(
        "no CUDA driver: could not load {} — NCCL needs an NVIDIA GPU and its driver",
        tried.join(", ")
    ))
}

/// NCCL, found as Note [Finding NCCL] says, loaded once per process.
pub(crate) fn nccl() -> Result<&'static Nccl, String> {
    static NCCL: OnceLock<Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(load_nccl).as_ref().map_err(Clone::clone)
}

fn load_nccl() -> Result<Nccl, String> {
    if let Some(path) = env::get(env::PHALANX_NCCL_LIBRARY) {
        // SAFETY: loading NCCL runs only its own initialisers.
        let lib = unsafe { Library::new(&path) }
            .map_err(|e| format!("PHALANX_NCCL_LIBRARY={path}: cannot load it: {e}"))?;
        return loaded(lib, path);
    }
    let mut tried = Vec::new();
    for name in ["libnccl.so.2", "libnccl.so"] {
        // SAFETY: as above.
        match unsafe { Library::new(name) } {
            Ok(lib) => return loaded(lib, name.to_string()),
            Err(e) => tried.push(format!("{name} ({e})")),
        }
    }
    for path in python_candidates() {
        if path.is_file() {
            // SAFETY: as above.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return loaded(lib, path.display().to_string()),
                Err(e) => tried.push(format!("{} ({e})", path.display())),
            }
        }
    }
    tried.push(
        "nvidia/{nccl,cu13,cu12}/lib/libnccl.so.2 in $VIRTUAL_ENV, $CONDA_PREFIX and python3's \
         site-packages (none)"
            .into(),
    );
    Err(format!(
        "NCCL not found: tried {}. Install it (Debian/Ubuntu: libnccl2; pip: nvidia-nccl-cu12 \
         or -cu13) or set PHALANX_NCCL_LIBRARY to the path of libnccl.so.2",
        tried.join("; ")
    ))
}

fn loaded(lib: Library, name: String) -> Result<Nccl, String> {
    let mut n = Nccl::resolve(lib, name)?;
    // A name (`libnccl.so.2`) says little when several are installed: log the file.
    n.path = file_of(n.ncclGetVersion as *const c_void).unwrap_or(n.path);
    tracing::info!(library = %n.path, version = %n.version(), "phalanx: NCCL loaded");
    Ok(n)
}

/// The file of the shared object that holds `addr` (`dladdr`).
fn file_of(addr: *const c_void) -> Option<String> {
    // SAFETY: Dl_info is plain pointers; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is a function of a loaded library; `info` is a valid out-pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr sets a NUL-terminated path owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    Some(std::fs::canonicalize(&*file).map_or(file.into_owned(), |p| p.display().to_string()))
}

/// `nvidia/nccl/lib/libnccl.so.2` under the Python environments this process can see.
fn python_candidates() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = std::env::var_os(var) {
            let lib = Path::new(&prefix).join("lib");
            if let Ok(dir) = std::fs::read_dir(&lib) {
                for e in dir.flatten() {
                    if e.file_name().to_string_lossy().starts_with("python") {
                        roots.push(e.path().join("site-packages"));
                    }
                }
            }
        }
    }
    roots.extend(python_site_packages());
    // nvidia-nccl-cu12/-cu13 install `nvidia/nccl/lib`; CUDA 13's merged wheels `nvidia/cu13/lib`.
    roots
        .into_iter()
        .flat_map(|r| {
            ["nccl", "cu13", "cu12"].map(|d| r.join("nvidia").join(d).join("lib/libnccl.so.2"))
        })
        .collect()
}

/// The site-packages directories `python3` reports; none when there is no `python3` or it
/// does not answer within two seconds.
fn python_site_packages() -> Vec<PathBuf> {
    let script =
        "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))";
    let Ok(mut child) = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return Vec::new();
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Vec::new();
            }
        }
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut s, &mut out);
    }
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On any machine: NCCL found (then it answers its version) or an error naming every
    /// place looked at.
    #[test]
    fn nccl_is_found_or_every_place_is_named() {
        match nccl() {
            Ok(n) => assert!(n.version().starts_with('2'), "{}", n.version()),
            Err(e) => {
                assert!(
                    e.contains("libnccl.so.2") && e.contains("PHALANX_NCCL_LIBRARY"),
                    "{e}"
                );
                assert!(e.contains("site-packages"), "{e}");
            }
        }
    }

    #[test]
    fn file_of_names_the_library_of_a_function() {
        let f = file_of(libc::getpid as *const c_void).expect("dladdr knows libc");
        assert!(f.contains("libc"), "{f}");
    }

    #[test]
    fn driver_is_found_or_named() {
        if let Err(e) = driver() {
            assert!(e.contains("libcuda.so.1") || e.contains("cuInit"), "{e}");
        }
    }

    #[test]
    fn python_candidates_point_into_nvidia_wheels() {
        for p in python_candidates() {
            assert!(p.ends_with("lib/libnccl.so.2"), "{}", p.display());
            let nvidia = p.parent().and_then(|d| d.parent()).and_then(|d| d.parent());
            assert!(
                nvidia.is_some_and(|d| d.ends_with("nvidia")),
                "{}",
                p.display()
            );
        }
    }
}
