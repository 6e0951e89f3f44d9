//! Where the model trains: [`DeviceSpec`] (`phalanx train --device cpu | cuda | cuda:N`),
//! chosen once per process with [`set_device`] (PyTorch's `torch.cuda.set_device`) and read by
//! [`device`] wherever the trainer creates a model.
//!
//! `cuda` without an index means `cuda:LOCAL_RANK`, as torchrun users expect: with
//! `--nproc-per-node 4` rank 0 of a node takes GPU 0, rank 3 takes GPU 3. CUDA needs the `cuda`
//! cargo feature; before Burn touches the GPU, the driver is probed (`device_cuda.rs`), so a
//! machine without one gets an error naming what was looked for instead of a panic deep in the
//! backend.
//!
//! Gradients never need the GPU to be shared: the DDP adapter reads each gradient back to host
//! `f32` and reduces it with the process group's backend (Note [Host-staged gradients] in
//! `phalanx-ddp`'s Burn adapter), as Gloo does for CUDA tensors. Ranks that share one GPU are
//! therefore fine with the native backend.

use std::{fmt, str::FromStr, sync::RwLock};

use burn::tensor::Device;

use crate::{Error, Result};

/// A training device as written on the command line.
///
/// ```
/// use phalanx_train::DeviceSpec;
/// assert_eq!("cuda:1".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(Some(1)));
/// assert_eq!("cuda".parse::<DeviceSpec>().unwrap().cuda_index(3), Some(3)); // LOCAL_RANK
/// assert_eq!(DeviceSpec::default().to_string(), "cpu");
/// assert!("tpu".parse::<DeviceSpec>().unwrap_err().contains("cuda:N"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// Burn's `flex` CPU backend.
    #[default]
    Cpu,
    /// Burn's CUDA backend on GPU `N`, or on GPU `LOCAL_RANK` when `None`.
    Cuda(Option<usize>),
}

impl DeviceSpec {
    /// The GPU this spec means for a process with `local_rank` (`None` for the CPU).
    pub fn cuda_index(self, local_rank: usize) -> Option<usize> {
        match self {
            DeviceSpec::Cpu => None,
            DeviceSpec::Cuda(i) => Some(i.unwrap_or(local_rank)),
        }
    }

    /// Whether this build can train on it (CUDA needs the `cuda` cargo feature).
    pub fn is_built(self) -> bool {
        match self {
            DeviceSpec::Cpu => true,
            DeviceSpec::Cuda(_) => cfg!(feature = "cuda"),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(None) => f.write_str("cuda"),
            DeviceSpec::Cuda(Some(i)) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<DeviceSpec, String> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || format!("unknown device {s:?}: expected cpu, cuda or cuda:N");
        match t.as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(None)),
            _ => match t.strip_prefix("cuda:") {
                Some(n) => n
                    .parse()
                    .map(|i| DeviceSpec::Cuda(Some(i)))
                    .map_err(|_| bad()),
                None => Err(bad()),
            },
        }
    }
}

/// The device chosen by [`set_device`]; `None`: the CPU.
static CHOSEN: RwLock<Option<Device>> = RwLock::new(None);

/// The training device with autodiff: the one [`set_device`] chose, else Burn's `flex` CPU
/// backend.
pub fn device() -> Device {
    let chosen = CHOSEN.read().unwrap_or_else(|p| p.into_inner()).clone();
    chosen.unwrap_or_else(cpu)
}

fn cpu() -> Device {
    Device::flex().autodiff()
}

/// Chooses the training device of this process: `spec` on the node-local rank `local_rank`
/// (which `cuda` without an index means). For CUDA, probes the driver and checks that the GPU
/// exists before Burn touches it; the error names the feature, the library or the GPU that is
/// missing.
///
/// ```
/// use phalanx_train::{device, set_device, DeviceSpec};
/// let d = set_device(DeviceSpec::Cpu, 0).unwrap();
/// assert_eq!(d, device());
/// ```
pub fn set_device(spec: DeviceSpec, local_rank: usize) -> Result<Device> {
    let d = match spec.cuda_index(local_rank) {
        None => cpu(),
        Some(index) => open_cuda(spec, index)?,
    };
    *CHOSEN.write().unwrap_or_else(|p| p.into_inner()) = Some(d.clone());
    Ok(d)
}

#[cfg(feature = "cuda")]
fn open_cuda(spec: DeviceSpec, index: usize) -> Result<Device> {
    let gpus = crate::device_cuda::probe().map_err(|reason| Error::Device {
        spec: spec.to_string(),
        reason,
    })?;
    let toolkit = crate::device_cuda::toolkit().map_err(|reason| Error::Device {
        spec: spec.to_string(),
        reason,
    })?;
    if index >= gpus.count {
        return Err(Error::Device {
            spec: spec.to_string(),
            reason: format!(
                "GPU {index} does not exist: the CUDA driver ({}) sees {} GPU(s){}",
                gpus.driver,
                gpus.count,
                if matches!(spec, DeviceSpec::Cuda(None)) {
                    " and `cuda` means cuda:LOCAL_RANK; give ranks that share a GPU an explicit \
                     index (--device cuda:0)"
                } else {
                    ""
                }
            ),
        });
    }
    tracing::info!(device = %format!("cuda:{index}"), driver = %gpus.driver, gpus = gpus.count, %toolkit, "phalanx: training on CUDA");
    Ok(Device::cuda(index).autodiff())
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(spec: DeviceSpec, _index: usize) -> Result<Device> {
    Err(Error::Device {
        spec: spec.to_string(),
        reason: "this build has no CUDA support: rebuild with the `cuda` cargo feature \
                 (`cargo build --release -p phalanx-cli --features cuda`; docs/gpu.md)"
            .into(),
    })
}

/// Number of CUDA GPUs this process can train on, from the driver (no Burn involved), or why
/// there are none: no `cuda` feature, no driver library, a driver that reports no device, or
/// no NVRTC / CUDA headers for Burn's kernel compiler.
///
/// ```
/// // On a machine without a GPU this is an error that says what was looked for.
/// match phalanx_train::cuda_device_count() {
///     Ok(n) => assert!(n > 0),
///     Err(why) => assert!(!why.is_empty()),
/// }
/// ```
pub fn cuda_device_count() -> std::result::Result<usize, String> {
    #[cfg(feature = "cuda")]
    {
        let count = crate::device_cuda::probe()?.count;
        crate::device_cuda::toolkit()?;
        Ok(count)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this build has no CUDA support (cargo feature `cuda`)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (s, d) in [
            ("cpu", DeviceSpec::Cpu),
            ("CUDA", DeviceSpec::Cuda(None)),
            ("cuda:7", DeviceSpec::Cuda(Some(7))),
        ] {
            assert_eq!(s.parse::<DeviceSpec>(), Ok(d));
            assert_eq!(d.to_string().parse::<DeviceSpec>(), Ok(d));
        }
        for bad in ["cuda:", "cuda:-1", "cuda:x", "mps", ""] {
            assert!(bad.parse::<DeviceSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn cuda_without_index_is_local_rank() {
        assert_eq!(DeviceSpec::Cuda(None).cuda_index(2), Some(2));
        assert_eq!(DeviceSpec::Cuda(Some(0)).cuda_index(2), Some(0));
        assert_eq!(DeviceSpec::Cpu.cuda_index(2), None);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_names_it() {
        let err = set_device(DeviceSpec::Cuda(Some(0)), 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`cuda` cargo feature") && err.contains("cuda:0"),
            "{err}"
        );
        assert!(!DeviceSpec::Cuda(None).is_built());
    }
}
