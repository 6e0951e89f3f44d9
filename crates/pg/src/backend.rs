//! [`Backend`]: which library runs the collectives, chosen by `--backend` / `PHALANX_BACKEND`.

use std::{fmt, str::FromStr};

use phalanx_core::env;

use crate::{ProcessGroup, Result};

/// The collective backend of a process group (Note \[Backends\] in `exec.rs`).
///
/// ```
/// use phalanx_pg::Backend;
/// assert_eq!("mpi".parse::<Backend>().unwrap(), Backend::Mpi);
/// assert!(Backend::Native.is_built());
/// assert_eq!("nccl".parse::<Backend>().unwrap(), Backend::Nccl);
/// assert!("gloo".parse::<Backend>().unwrap_err().contains("native"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
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

impl Backend {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }

    /// Whether this build of phalanx contains the backend.
    pub fn is_built(self) -> bool {
        match self {
            Backend::Native => true,
            Backend::Mpi => cfg!(feature = "mpi"),
            Backend::Nccl => cfg!(feature = "nccl"),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Backend, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" => Ok(Backend::Native),
            "mpi" => Ok(Backend::Mpi),
            "nccl" => Ok(Backend::Nccl),
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
pub fn init_backend(backend: Backend) -> Result<ProcessGroup> {
    match backend {
        Backend::Native => crate::init_with(crate::InitOptions::from_env()?),
        #[cfg(feature = "mpi")]
        Backend::Mpi => crate::init_mpi(),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => Err(crate::Error::Backend {
            backend: "mpi",
            reason: "this build of phalanx-pg has no MPI support (enable its `mpi` feature)".into(),
        }),
        #[cfg(feature = "nccl")]
        Backend::Nccl => crate::init_nccl(),
        #[cfg(not(feature = "nccl"))]
        Backend::Nccl => Err(crate::Error::Backend {
            backend: "nccl",
            reason: "this build of phalanx-pg has no NCCL support (enable its `nccl` feature)"
                .into(),
        }),
    }
}

/// Creates the default process group from the launcher's environment (torchrun's
/// variables, or Open MPI's, MPICH's, Slurm's).
///
/// `PHALANX_BACKEND` picks the backend (`native` by default; `mpi` and `nccl` need the crate
/// features of the same names), as `--backend` does for the `phalanx` commands.
pub fn init_process_group() -> Result<ProcessGroup> {
    let backend = match env::get(env::PHALANX_BACKEND) {
        None => Backend::Native,
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
        assert_eq!(" Native ".parse::<Backend>(), Ok(Backend::Native));
        assert_eq!(Backend::Mpi.to_string(), "mpi");
        let err = "gloo".parse::<Backend>().unwrap_err();
        assert!(err.contains("\"gloo\"") && err.contains("mpi"), "{err}");
    }

    #[cfg(not(feature = "nccl"))]
    #[test]
    fn nccl_without_the_feature_names_it() {
        let err = init_backend(Backend::Nccl).unwrap_err().to_string();
        assert!(err.contains("`nccl` feature"), "{err}");
        assert!(!Backend::Nccl.is_built());
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn mpi_without_the_feature_names_it() {
        let err = init_backend(Backend::Mpi).unwrap_err().to_string();
        assert!(err.contains("`mpi` feature"), "{err}");
    }
}
