//! Where a process learns its rank: torchrun's variables, or Open MPI's, MPICH's or Slurm's.
//!
//! Pure over a lookup function so that every scheduler's layout is unit-tested without
//! touching the process environment. Which scheduler's variables to read is
//! [`Launcher::detect_with`]'s answer (phalanx_core), the same one that decides whether a
//! process was launched at all; with none, a lone `RANK` still reads as torchrun's (so a
//! missing `WORLD_SIZE` is named), and otherwise this is a single process.

use phalanx_core::Launcher;

use crate::{Error, Result};

/// Default store port (PyTorch's).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// Global rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// Rank on this host.
    pub local_rank: usize,
    /// Processes on this host.
    pub local_world_size: usize,
    /// Rank of this host among the job's hosts.
    pub group_rank: usize,
    /// Store host.
    pub master_addr: String,
    /// Store port.
    pub master_port: u16,
    /// Which convention supplied the values (`torchrun`, `openmpi`, `mpich`, `slurm`, `single`).
    pub source: &'static str,
}

fn num(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>> {
    match get(name) {
        None => Ok(None),
        Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| Error::Env {
            name: name.into(),
            value: v,
            reason: "expected a non-negative integer".into(),
        }),
    }
}

fn need(get: &dyn Fn(&str) -> Option<String>, name: &str, why: &str) -> Result<usize> {
    num(get, name)?.ok_or_else(|| Error::Env {
        name: name.into(),
        value: String::new(),
        reason: format!("not set ({why})"),
    })
}

impl DistEnv {
    /// Reads the current process environment.
    pub fn from_env() -> Result<DistEnv> {
        DistEnv::from_lookup(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// Reads through `get` (tests pass a map).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<DistEnv> {
        let port = match get("MASTER_PORT") {
            None => DEFAULT_MASTER_PORT,
            Some(p) => p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| Error::Env {
                    name: "MASTER_PORT".into(),
                    value: p,
                    reason: "expected a port number 1-65535".into(),
                })?,
        };
        let addr = get("MASTER_ADDR");
        let launcher = Launcher::detect_with(get);
        let slurm_step = get("SLURM_STEP_ID").is_some() && get("SLURM_PROCID").is_some();
        let mut e = if matches!(launcher, Some(Launcher::Phalanx | Launcher::Torchrun))
            || (launcher.is_none() && get("RANK").is_some())
        {
            let rank = need(get, "RANK", "")?;
            let world_size = need(get, "WORLD_SIZE", "RANK is set, so WORLD_SIZE must be too")?;
            let local_world_size = num(get, "LOCAL_WORLD_SIZE")?.unwrap_or(world_size);
            DistEnv {
                rank,
                world_size,
                local_rank: num(get, "LOCAL_RANK")?.unwrap_or(rank % local_world_size.max(1)),
                local_world_size,
                group_rank: num(get, "GROUP_RANK")?.unwrap_or(rank / local_world_size.max(1)),
                master_addr: String::new(),
                master_port: port,
                source: "torchrun",
            }
        } else if launcher == Some(Launcher::OpenMpi) {
            let world_size = need(get, "OMPI_COMM_WORLD_SIZE", "set by mpirun")?;
            let local_world_size = num(get, "OMPI_COMM_WORLD_LOCAL_SIZE")?.unwrap_or(world_size);
            let rank = need(get, "OMPI_COMM_WORLD_RANK", "")?;
            DistEnv {
                rank,
                world_size,
                local_rank: num(get, "OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(0),
                local_world_size,
                group_rank: num(get, "OMPI_COMM_WORLD_NODE_RANK")?
                    .unwrap_or(rank / local_world_size.max(1)),
                master_addr: String::new(),
                master_port: port,
                source: "openmpi",
            }
        } else if launcher == Some(Launcher::Mpich) {
            let world_size = need(get, "PMI_SIZE", "set by the MPICH launcher")?;
            let local_world_size = num(get, "MPI_LOCALNRANKS")?.unwrap_or(world_size);
            let rank = need(get, "PMI_RANK", "")?;
            DistEnv {
                rank,
                world_size,
                local_rank: num(get, "MPI_LOCALRANKID")?.unwrap_or(0),
                local_world_size,
                group_rank: rank / local_world_size.max(1),
                master_addr: String::new(),
                master_port: port,
                source: "mpich",
            }
        } else if launcher == Some(Launcher::Slurm)
            // `srun --mpi=pmix` sets both; the step's variables carry the sizes.
            || (launcher == Some(Launcher::Pmix) && slurm_step)
        {
            let node = num(get, "SLURM_NODEID")?.unwrap_or(0);
            let world_size = need(get, "SLURM_NTASKS", "set by srun")?;
            let local_world_size = match get("SLURM_STEP_TASKS_PER_NODE") {
                Some(spec) => tasks_on_node(&spec, node).ok_or_else(|| Error::Env {
                    name: "SLURM_STEP_TASKS_PER_NODE".into(),
                    value: spec,
                    reason: format!("cannot find the task count of node {node} (format `2(x3),1`)"),
                })?,
                None => world_size,
            };
            let master = get("SLURM_STEP_NODELIST")
                .or_else(|| get("SLURM_JOB_NODELIST"))
                .and_then(|l| first_host(&l));
            DistEnv {
                rank: need(get, "SLURM_PROCID", "")?,
                world_size,
                local_rank: num(get, "SLURM_LOCALID")?.unwrap_or(0),
                local_world_size,
                group_rank: node,
                master_addr: master.unwrap_or_default(),
                master_port: port,
                source: "slurm",
            }
        } else if launcher == Some(Launcher::Pmix) {
            // PMIx hands out the world size through its API, not the environment: reading
            // this as a single process would train N copies of a world of one.
            return Err(Error::Env {
                name: "PMIX_RANK".into(),
                value: get("PMIX_RANK").unwrap_or_default(),
                reason: "a PMIx launcher started this process but set no world size; use \
                         --backend mpi, or set RANK and WORLD_SIZE"
                    .into(),
            });
        } else {
            DistEnv {
                rank: 0,
                world_size: 1,
                local_rank: 0,
                local_world_size: 1,
                group_rank: 0,
                master_addr: String::new(),
                master_port: port,
                source: "single",
            }
        };
        if let Some(a) = addr {
            e.master_addr = a;
        }
        if e.master_addr.is_empty() {
            if e.world_size > 1 && e.local_world_size < e.world_size {
                return Err(Error::Env {
                    name: "MASTER_ADDR".into(),
                    value: String::new(),
                    reason: format!(
                        "not set; a {}-process job across hosts ({}) needs the store's address \
                         (e.g. `mpirun -x MASTER_ADDR=<host of rank 0>`)",
                        e.world_size, e.source
                    ),
                });
            }
            e.master_addr = "127.0.0.1".into();
        }
        if e.world_size == 0 {
            return Err(Error::Env {
                name: "WORLD_SIZE".into(),
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        if e.rank >= e.world_size {
            return Err(Error::Env {
                name: "RANK".into(),
                value: e.rank.to_string(),
                reason: format!("must be below WORLD_SIZE={}", e.world_size),
            });
        }
        if e.local_rank >= e.local_world_size {
            return Err(Error::Env {
                name: "LOCAL_RANK".into(),
                value: e.local_rank.to_string(),
                reason: format!("must be below LOCAL_WORLD_SIZE={}", e.local_world_size),
            });
        }
        Ok(e)
    }
}

/// Task count of node `node` in Slurm's `2(x3),1` syntax.
pub fn tasks_on_node(spec: &str, node: usize) -> Option<usize> {
    let mut seen = 0usize;
    for part in spec.split(',') {
        let (count, reps) = match part.split_once("(x") {
            Some((c, r)) => (
                c.trim().parse().ok()?,
                r.trim_end_matches(')').parse().ok()?,
            ),
            None => (part.trim().parse().ok()?, 1usize),
        };
        // Saturating: hostile counts like `1(x18446744073709551615)` must not overflow.
        if node < seen.saturating_add(reps) {
            return Some(count);
        }
        seen = seen.saturating_add(reps);
    }
    None
}

/// First host of a Slurm hostlist (`node[01-04,07],gpu5` → `node01`).
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    let prefix = &list[..end];
    if list[end..].starts_with('[') {
        let inner = &list[end + 1..list[end..].find(']')? + end];
        let first = inner.split([',', '-']).next()?;
        let close = list[end..].find(']')? + end;
        let suffix_end = list[close + 1..]
            .find(',')
            .map_or(list.len(), |i| i + close + 1);
        return Some(format!("{prefix}{first}{}", &list[close + 1..suffix_end]));
    }
    (!prefix.is_empty()).then(|| prefix.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<DistEnv> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DistEnv::from_lookup(&move |k| m.get(k).cloned())
    }

    #[test]
    fn torchrun() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!(
            (e.rank, e.world_size, e.local_rank, e.group_rank),
            (3, 4, 1, 1)
        );
        assert_eq!(
            (e.master_addr.as_str(), e.master_port, e.source),
            ("10.0.0.1", 1234, "torchrun")
        );
    }

    #[test]
    fn schedulers() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("MASTER_ADDR", "h0"),
        ])
        .unwrap();
        assert_eq!(
            (e.rank, e.local_rank, e.group_rank, e.source),
            (5, 1, 1, "openmpi")
        );
        let e = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]).unwrap();
        assert_eq!(
            (e.rank, e.world_size, e.master_addr.as_str()),
            (1, 2, "127.0.0.1")
        );
        let slurm = [
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "4"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_TASKS_PER_NODE", "3(x2),1"),
            ("SLURM_STEP_NODELIST", "node[07-09]"),
        ];
        let e = env(&slurm).unwrap();
        assert_eq!((e.rank, e.local_world_size, e.group_rank), (4, 3, 1));
        assert_eq!(e.master_addr, "node07");
        // Without SLURM_STEP_ID (a batch script), Slurm's variables are not trusted.
        let e = env(&slurm[1..]).unwrap();
        assert_eq!((e.world_size, e.source), (1, "single"));
    }

    #[test]
    fn errors_name_the_variable() {
        let err = env(&[("RANK", "4"), ("WORLD_SIZE", "4")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RANK") && err.contains("WORLD_SIZE=4"),
            "{err}"
        );
        let err = env(&[("RANK", "x"), ("WORLD_SIZE", "4")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("RANK=\"x\""), "{err}");
        let err = env(&[("RANK", "0")]).unwrap_err().to_string();
        assert!(err.contains("WORLD_SIZE"), "{err}");
        let err = env(&[("MASTER_PORT", "99999")]).unwrap_err().to_string();
        assert!(err.contains("MASTER_PORT"), "{err}");
        let err = env(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("MASTER_ADDR"), "{err}");
    }

    #[test]
    fn slurm_syntax() {
        assert_eq!(tasks_on_node("2(x3),1", 0), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(first_host("node[01-04,07]").as_deref(), Some("node01"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("gpu[3,5]-ib,x").as_deref(), Some("gpu3-ib"));
    }
}
