//! The environment of each worker: torchrun's variables (REFERENCE.md, "torchrun: environment
//! of each worker") plus phalanx's job credentials and store prefix. Pure, so it is unit-tested.

use std::ffi::OsString;
use std::path::PathBuf;

/// Where a node's workers sit in the job for one rendezvous round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// This node's rank (GROUP_RANK).
    pub(crate) group_rank: u32,
    /// Number of nodes (GROUP_WORLD_SIZE).
    pub(crate) group_world_size: u32,
    /// Workers on this node.
    pub(crate) local_world_size: u32,
    /// Global rank of this node's local rank 0: sum of the local world sizes of smaller nodes.
    pub(crate) base_rank: u32,
    /// Workers in the job.
    pub(crate) world_size: u32,
    /// Every node's workers, in group-rank order (a node's ranks follow the earlier nodes').
    pub(crate) sizes: Vec<u32>,
}

impl Layout {
    /// Rank assignment from every node's local world size (indexed by node rank), torchrun's
    /// rule: global rank = sum of local_world_size over smaller group ranks + local_rank.
    pub(crate) fn from_sizes(group_rank: u32, sizes: &[u32]) -> Layout {
        Layout {
            group_rank,
            group_world_size: sizes.len() as u32,
            local_world_size: sizes[group_rank as usize],
            base_rank: sizes[..group_rank as usize].iter().sum(),
            world_size: sizes.iter().sum(),
            sizes: sizes.to_vec(),
        }
    }

    /// The global rank of `local_rank`.
    pub(crate) fn rank(&self, local_rank: u32) -> u32 {
        self.base_rank + local_rank
    }
}

/// Everything besides the layout that goes into a worker's environment.
#[derive(Clone, Debug)]
pub(crate) struct JobEnv {
    pub(crate) run_id: String,
    pub(crate) master_addr: String,
    pub(crate) master_port: u16,
    pub(crate) token_hex: String,
    pub(crate) round: u32,
    pub(crate) max_restarts: u32,
    /// Set OMP_NUM_THREADS=1 (it was unset and nproc > 1).
    pub(crate) set_omp: bool,
    /// `<log_dir>/<run_id>/attempt_<round>` when --log-dir is given.
    pub(crate) attempt_dir: Option<PathBuf>,
    /// `--fault-tolerance`: the workers re-form their group after a death.
    pub(crate) fault_tolerance: bool,
    /// A replacement of a dead worker, or a worker of a node admitted into the running round
    /// (`--fault-tolerance`): it takes its state from the running ranks.
    pub(crate) replacement: bool,
    /// `--fault-tolerance`: the round's first world size (`PHALANX_FT_SLOTS`).
    pub(crate) first_world: u32,
    /// `--role` (`ROLE_NAME`).
    pub(crate) role: String,
    /// `--local-addr`'s interface, as `PHALANX_SOCKET_IFNAME` (`=name`, exact).
    pub(crate) local_ifname: Option<String>,
    /// `--rdzv-backend etcd`: the workers reach the job's store in etcd (`PHALANX_ETCD_*`),
    /// and PyTorch's rank 0 hosts its own TCPStore at `MASTER_ADDR:MASTER_PORT`, as under
    /// torchrun's etcd backend (no agent hosts a store).
    pub(crate) etcd: Option<phalanx_store::EtcdOptions>,
}

/// The variables set for `local_rank` (on top of the agent's inherited environment).
pub(crate) fn worker_env(job: &JobEnv, layout: &Layout, local_rank: u32) -> Vec<(String, String)> {
    let rank = layout.rank(local_rank).to_string();
    let world = layout.world_size.to_string();
    let mut v: Vec<(&str, String)> = vec![
        ("RANK", rank.clone()),
        ("WORLD_SIZE", world.clone()),
        ("LOCAL_RANK", local_rank.to_string()),
        ("LOCAL_WORLD_SIZE", layout.local_world_size.to_string()),
        ("GROUP_RANK", layout.group_rank.to_string()),
        ("GROUP_WORLD_SIZE", layout.group_world_size.to_string()),
        ("ROLE_RANK", rank),
        ("ROLE_NAME", job.role.clone()),
        ("ROLE_WORLD_SIZE", world),
        ("MASTER_ADDR", job.master_addr.clone()),
        ("MASTER_PORT", job.master_port.to_string()),
        ("TORCHELASTIC_RESTART_COUNT", job.round.to_string()),
        ("TORCHELASTIC_MAX_RESTARTS", job.max_restarts.to_string()),
        ("TORCHELASTIC_RUN_ID", job.run_id.clone()),
        (
            "TORCHELASTIC_USE_AGENT_STORE",
            match job.etcd {
                Some(_) => "False".into(),
                None => "True".into(),
            },
        ),
        ("PHALANX_TOKEN", job.token_hex.clone()),
        ("PHALANX_JOB_ID", job.run_id.clone()),
        (
            "PHALANX_STORE_PREFIX",
            phalanx_store::keys::round_prefix(job.round),
        ),
        ("PHALANX_LAUNCHED", "1".into()),
    ];
    if std::env::var_os("TORCH_NCCL_ASYNC_ERROR_HANDLING").is_none() {
        v.push(("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into()));
    }
    if crate::progress::enabled() {
        v.push(("PHALANX_PROGRESS", "1".into()));
    }
    if let Some(o) = &job.etcd {
        v.extend(o.to_env());
    }
    if job.fault_tolerance {
        v.push(("PHALANX_FAULT_TOLERANCE", "1".into()));
        v.push(("PHALANX_FT_SLOTS", job.first_world.to_string()));
    }
    if job.replacement {
        v.push(("PHALANX_FT_REPLACEMENT", "1".into()));
    }
    if let Some(ifname) = &job.local_ifname {
        v.push(("PHALANX_SOCKET_IFNAME", format!("={ifname}")));
    }
    if job.set_omp {
        v.push(("OMP_NUM_THREADS", "1".into()));
    }
    if let Some(dir) = &job.attempt_dir {
        let file = dir.join(local_rank.to_string()).join("error.json");
        v.push(("TORCHELASTIC_ERROR_FILE", file.display().to_string()));
    }
    v.into_iter().map(|(k, val)| (k.to_string(), val)).collect()
}

/// The program's arguments with `${local_rank}` replaced, as torchrun does.
pub(crate) fn substitute_args(args: &[OsString], local_rank: u32) -> Vec<OsString> {
    args.iter()
        .map(|a| match a.to_str() {
            Some(s) if s.contains("${local_rank}") => {
                OsString::from(s.replace("${local_rank}", &local_rank.to_string()))
            }
            _ => a.clone(),
        })
        .collect()
}

/// torchrun's warning, printed once when the launcher sets OMP_NUM_THREADS.
pub(crate) const OMP_WARNING: &str = "*****************************************\n\
Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your \
system being overloaded, please further tune the variable for optimal performance in your \
application as needed. \n*****************************************";

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobEnv {
        JobEnv {
            run_id: "r1".into(),
            master_addr: "10.1.2.3".into(),
            master_port: 29501,
            token_hex: "abcd".into(),
            round: 2,
            max_restarts: 3,
            set_omp: true,
            attempt_dir: Some(PathBuf::from("/logs/r1/attempt_2")),
            fault_tolerance: false,
            replacement: false,
            first_world: 4,
            role: "default".into(),
            local_ifname: None,
            etcd: None,
        }
    }

    fn get<'a>(env: &'a [(String, String)], k: &str) -> &'a str {
        &env.iter()
            .find(|(n, _)| n == k)
            .unwrap_or_else(|| panic!("{k} missing"))
            .1
    }

    #[test]
    fn ranks_sum_smaller_nodes() {
        let l = Layout::from_sizes(2, &[2, 3, 4]);
        assert_eq!((l.base_rank, l.world_size, l.local_world_size), (5, 9, 4));
        assert_eq!(l.rank(3), 8);
        let l = Layout::from_sizes(0, &[2]);
        assert_eq!((l.base_rank, l.world_size, l.rank(1)), (0, 2, 1));
    }

    #[test]
    fn torchrun_environment() {
        let env = worker_env(&job(), &Layout::from_sizes(1, &[2, 2]), 1);
        for (k, v) in [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "1"),
            ("GROUP_WORLD_SIZE", "2"),
            ("ROLE_RANK", "3"),
            ("ROLE_NAME", "default"),
            ("ROLE_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.1.2.3"),
            ("MASTER_PORT", "29501"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
            ("TORCHELASTIC_MAX_RESTARTS", "3"),
            ("TORCHELASTIC_RUN_ID", "r1"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("PHALANX_TOKEN", "abcd"),
            ("PHALANX_JOB_ID", "r1"),
            ("PHALANX_STORE_PREFIX", "round/2"),
            ("OMP_NUM_THREADS", "1"),
            ("TORCHELASTIC_ERROR_FILE", "/logs/r1/attempt_2/1/error.json"),
        ] {
            assert_eq!(get(&env, k), v, "{k}");
        }
        let mut j = job();
        j.set_omp = false;
        j.attempt_dir = None;
        let env = worker_env(&j, &Layout::from_sizes(0, &[1]), 0);
        assert!(!env
            .iter()
            .any(|(k, _)| k == "OMP_NUM_THREADS" || k == "TORCHELASTIC_ERROR_FILE"));
    }

    #[test]
    fn local_rank_substitution() {
        let args: Vec<OsString> = ["--out=log${local_rank}.txt", "plain", "${local_rank}"]
            .iter()
            .map(OsString::from)
            .collect();
        let got = substitute_args(&args, 3);
        assert_eq!(
            got,
            vec![OsString::from("--out=log3.txt"), "plain".into(), "3".into()]
        );
    }
}
