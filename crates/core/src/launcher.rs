//! Which launcher started this process, decided in one place.
//!
//! `phalanx train` must not launch itself inside a worker, the process group must read its
//! rank from the right scheduler's variables, and `--backend mpi` must know whether an MPI
//! launcher started it. All three ask [`Launcher::detect`], so they cannot disagree.
//!
//! ```
//! use phalanx_core::Launcher;
//! let env = |k: &str| match k {
//!     "OMPI_COMM_WORLD_RANK" => Some("3".to_string()),
//!     _ => None,
//! };
//! assert_eq!(Launcher::detect_with(&env), Some(Launcher::OpenMpi));
//! assert!(Launcher::OpenMpi.is_mpi());
//! assert_eq!(Launcher::detect_with(&|_| None), None);
//! ```

/// Exit code of a worker under `phalanx launch --fault-tolerance` whose process group failed
/// and whom no replacement generation joined (Note [FT generations] in phalanx-pg): replacing
/// it would not help (a whole node is gone, or the restart budget is spent), so its agent
/// ends the round instead, as without fault tolerance.
pub const EXIT_NO_REGROUP: u8 = 76;

/// A launcher or scheduler that starts one process per rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `phalanx launch` (`PHALANX_LAUNCHED`), which also sets torchrun's variables.
    Phalanx,
    /// torchrun, or any launcher that sets `RANK` and `WORLD_SIZE` (Kubeflow's workers).
    Torchrun,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`).
    OpenMpi,
    /// MPICH's or Intel MPI's Hydra (`PMI_RANK`).
    Mpich,
    /// A PMIx launcher that sets only `PMIX_RANK` (`srun --mpi=pmix`, `prterun`).
    Pmix,
    /// A Slurm job step (`srun`: `SLURM_STEP_ID` and `SLURM_PROCID`).
    Slurm,
}

impl Launcher {
    /// Reads the current process environment (empty values count as unset).
    pub fn detect() -> Option<Launcher> {
        Launcher::detect_with(&|k| std::env::var(k).ok())
    }

    /// Reads through `get` (tests pass a map). Precedence: phalanx → torchrun → Open MPI →
    /// MPICH → PMIx → Slurm. A bare Slurm batch script also has `SLURM_PROCID=0`, so Slurm
    /// counts only inside a step. Under Kubeflow, where `RANK` is the pod's index and
    /// `PET_NPROC_PER_NODE` asks for an agent, a process without `LOCAL_RANK` is that agent,
    /// not a worker.
    pub fn detect_with(get: &dyn Fn(&str) -> Option<String>) -> Option<Launcher> {
        let set = |k: &str| get(k).is_some_and(|v| !v.is_empty());
        if set("PHALANX_LAUNCHED") {
            Some(Launcher::Phalanx)
        } else if set("PET_NPROC_PER_NODE") && !set("LOCAL_RANK") {
            None
        } else if set("RANK") && set("WORLD_SIZE") {
            Some(Launcher::Torchrun)
        } else if let Some(mpi) = Launcher::mpi_with(get) {
            Some(mpi)
        } else if set("SLURM_STEP_ID") && set("SLURM_PROCID") {
            Some(Launcher::Slurm)
        } else {
            None
        }
    }

    /// The MPI launcher whose variables are set, whatever else is: `mpirun -x RANK` is still
    /// an MPI launch, where `--backend mpi` can join MPI's world.
    pub fn mpi_with(get: &dyn Fn(&str) -> Option<String>) -> Option<Launcher> {
        let set = |k: &str| get(k).is_some_and(|v| !v.is_empty());
        if set("OMPI_COMM_WORLD_RANK") {
            Some(Launcher::OpenMpi)
        } else if set("PMI_RANK") {
            Some(Launcher::Mpich)
        } else if set("PMIX_RANK") {
            Some(Launcher::Pmix)
        } else {
            None
        }
    }

    /// [`Launcher::mpi_with`] over the current process environment.
    pub fn mpi() -> Option<Launcher> {
        Launcher::mpi_with(&|k| std::env::var(k).ok())
    }

    /// Whether it is an MPI launcher, whose ranks can join MPI's world (`--backend mpi`).
    pub fn is_mpi(self) -> bool {
        matches!(self, Launcher::OpenMpi | Launcher::Mpich | Launcher::Pmix)
    }

    /// The convention its variables follow: `torchrun` (phalanx's too), `openmpi`, `mpich`,
    /// `pmix` or `slurm`.
    pub fn convention(self) -> &'static str {
        match self {
            Launcher::Phalanx | Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "openmpi",
            Launcher::Mpich => "mpich",
            Launcher::Pmix => "pmix",
            Launcher::Slurm => "slurm",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Launcher;

    fn detect(vars: &[(&str, &str)]) -> Option<Launcher> {
        Launcher::detect_with(&|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn each_launcher_is_recognised_by_its_variables() {
        assert_eq!(
            detect(&[("PHALANX_LAUNCHED", "1"), ("RANK", "0")]),
            Some(Launcher::Phalanx)
        );
        assert_eq!(
            detect(&[("RANK", "1"), ("WORLD_SIZE", "2")]),
            Some(Launcher::Torchrun)
        );
        assert_eq!(
            detect(&[("OMPI_COMM_WORLD_RANK", "0")]),
            Some(Launcher::OpenMpi)
        );
        assert_eq!(detect(&[("PMI_RANK", "0")]), Some(Launcher::Mpich));
        assert_eq!(detect(&[("PMIX_RANK", "0")]), Some(Launcher::Pmix));
        assert_eq!(
            detect(&[("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "1")]),
            Some(Launcher::Slurm)
        );
    }

    #[test]
    fn partial_or_empty_variables_are_not_a_launcher() {
        assert_eq!(detect(&[]), None);
        // RANK alone (a user's shell), an empty PHALANX_LAUNCHED, a Slurm batch script.
        assert_eq!(detect(&[("RANK", "0")]), None);
        assert_eq!(detect(&[("PHALANX_LAUNCHED", "")]), None);
        assert_eq!(detect(&[("SLURM_PROCID", "0")]), None);
    }

    #[test]
    fn a_kubeflow_agent_is_not_a_worker_but_its_workers_are() {
        let agent = [
            ("PET_NPROC_PER_NODE", "4"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
        ];
        assert_eq!(detect(&agent), None);
        let worker = [
            ("PET_NPROC_PER_NODE", "4"),
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
        ];
        assert_eq!(detect(&worker), Some(Launcher::Torchrun));
    }

    #[test]
    fn an_mpi_launch_is_seen_under_torchrun_variables() {
        let get = |k: &str| {
            ["OMPI_COMM_WORLD_RANK", "RANK", "WORLD_SIZE"]
                .contains(&k)
                .then(|| "0".into())
        };
        assert_eq!(Launcher::detect_with(&get), Some(Launcher::Torchrun));
        assert_eq!(Launcher::mpi_with(&get), Some(Launcher::OpenMpi));
        assert_eq!(Launcher::mpi_with(&|_| None), None);
    }

    #[test]
    fn only_mpi_launchers_can_start_the_mpi_backend() {
        assert!(Launcher::OpenMpi.is_mpi() && Launcher::Mpich.is_mpi() && Launcher::Pmix.is_mpi());
        assert!(!Launcher::Phalanx.is_mpi() && !Launcher::Torchrun.is_mpi());
        assert!(!Launcher::Slurm.is_mpi());
    }
}
