//! [`BackendType`]: which library runs the collectives, chosen by `--backend` /
//! `PHALANX_BACKEND`; and the functions that create a group on one ([`init_backend`],
//! [`init_process_group`]).

use std::{fmt, str::FromStr};

use phalanx_core::env;

use crate::{ProcessGroup, Result};

/// Which backend runs a process group's collectives (Note \[Backends\] in `exec.rs`).
///
/// PyTorch's `c10d::ProcessGroup::BackendType` (`ProcessGroup.BackendType` in Python): the name
/// of a backend, not the backend. The word `Backend` alone is c10d's for what runs the
/// collectives (`c10d::Backend`, the base class of `ProcessGroupGloo`, `ProcessGroupNCCL` and
/// `ProcessGroupMPI`), which in this crate is the crate-private trait of that name
/// (`backend.rs`), implemented by `native.rs`, `mpi/` and `nccl/`. So this enum takes c10d's
/// name for the choice among them (it was `Backend` before the trait existed), and no word
/// means two things.
///
/// ```
/// use phalanx_pg::BackendType;
/// assert_eq!("mpi".parse::<BackendType>().unwrap(), BackendType::Mpi);
/// assert!(BackendType::Native.is_built());
/// assert_eq!("nccl".parse::<BackendType>().unwrap(), BackendType::Nccl);
/// assert!("gloo".parse::<BackendType>().unwrap_err().contains("native"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendType {
    /// Phalanx's own collectives over TCP and shared memory; ranks from the launcher's
    /// environment and a rendezvous store.
    #[default]
    Native,
    /// The MPI library's collectives on `MPI_COMM_WORLD`; ranks from MPI (`mpirun`). Built
    /// only with the `mpi` cargo feature.
    Mpi,
    /// NCCL's collectives on GPU `LOCAL_RANK`; ranks from the launcher's environment, like
    /// `Native`. Built only with the `nccl` cargo feature (docs/gpu.md).
    Nccl,
}

impl BackendType {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendType::Native => "native",
            BackendType::Mpi => "mpi",
            BackendType::Nccl => "nccl",
        }
    }

    /// Whether this build of phalanx contains the backend.
    pub fn is_built(self) -> bool {
        match self {
            BackendType::Native => true,
            BackendType::Mpi => cfg!(feature = "mpi"),
            BackendType::Nccl => cfg!(feature = "nccl"),
        }
    }
}

impl fmt::Display for BackendType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<BackendType, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" => Ok(BackendType::Native),
            "mpi" => Ok(BackendType::Mpi),
            "nccl" => Ok(BackendType::Nccl),
            other => Err(format!(
                "unknown backend {other:?}: phalanx has `native` (TCP + shared memory), `mpi` \
                 and `nccl`"
            )),
        }
    }
}

/// Creates the process group on `backend`: [`init_process_group`]
/// for `Native`, `init_mpi` for `Mpi`, `init_nccl` for `Nccl` (an
/// [`Error::Backend`](crate::Error::Backend) when this build lacks the backend's feature).
pub fn init_backend(backend: BackendType) -> Result<ProcessGroup> {
    match backend {
        BackendType::Native => crate::init_with(crate::InitOptions::from_env()?),
        #[cfg(feature = "mpi")]
        BackendType::Mpi => crate::init_mpi(),
        #[cfg(not(feature = "mpi"))]
        BackendType::Mpi => Err(not_built(backend)),
        #[cfg(feature = "nccl")]
        BackendType::Nccl => crate::init_nccl(),
        #[cfg(not(feature = "nccl"))]
        BackendType::Nccl => Err(not_built(backend)),
    }
}

/// The error for a backend this build lacks, naming the feature that adds it. A function of
/// its own, used only where a feature is off, so that a build with every feature (CI's) still
/// tests the words.
#[cfg_attr(all(feature = "mpi", feature = "nccl"), allow(dead_code))]
fn not_built(backend: BackendType) -> crate::Error {
    let name = backend.name();
    crate::Error::Backend {
        backend: name,
        reason: format!(
            "this build of phalanx-pg has no {} support (enable its `{name}` feature)",
            name.to_ascii_uppercase()
        ),
    }
}

/// Creates the default process group from the launcher's environment (torchrun's
/// variables, or Open MPI's, MPICH's, Slurm's).
///
/// `PHALANX_BACKEND` picks the backend (`native` by default; `mpi` and `nccl` need the crate
/// features of the same names), as `--backend` does for the `phalanx` commands.
pub fn init_process_group() -> Result<ProcessGroup> {
    let backend = match env::get(env::PHALANX_BACKEND) {
        None => BackendType::Native,
        Some(v) => v.parse().map_err(|reason| crate::Error::Env {
            name: "PHALANX_BACKEND".into(),
            value: v,
            reason,
        })?,
    };
    init_backend(backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_refuses_others() {
        assert_eq!(" Native ".parse::<BackendType>(), Ok(BackendType::Native));
        assert_eq!(BackendType::Mpi.to_string(), "mpi");
        let err = "gloo".parse::<BackendType>().unwrap_err();
        assert!(err.contains("\"gloo\"") && err.contains("mpi"), "{err}");
    }

    #[test]
    fn a_backend_not_built_is_refused_naming_its_feature() {
        for (backend, words) in [
            (
                BackendType::Mpi,
                "no MPI support (enable its `mpi` feature)",
            ),
            (
                BackendType::Nccl,
                "no NCCL support (enable its `nccl` feature)",
            ),
        ] {
            let err = not_built(backend).to_string();
            assert!(err.contains(words), "{err}");
            assert!(
                matches!(not_built(backend), crate::Error::Backend { backend: b, .. } if b == backend.name())
            );
        }
    }

    #[cfg(not(feature = "nccl"))]
    #[test]
    fn nccl_without_the_feature_names_it() {
        let err = init_backend(BackendType::Nccl).unwrap_err().to_string();
        assert!(err.contains("`nccl` feature"), "{err}");
        assert!(!BackendType::Nccl.is_built());
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn mpi_without_the_feature_names_it() {
        let err = init_backend(BackendType::Mpi).unwrap_err().to_string();
        assert!(err.contains("`mpi` feature"), "{err}");
    }
}
