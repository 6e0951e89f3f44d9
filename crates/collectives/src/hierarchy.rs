//! [`Hierarchy`]: which ranks share a host, the layout the two-level allreduce
//! (`hierarchical`) runs over.

/// Which ranks share a host, for the hierarchical allreduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Ranks of each host, in rank order; every host holds the same number.
    hosts: Vec<Vec<usize>>,
}

impl Hierarchy {
    /// Hosts' ranks (each rank in exactly one host). `None` when the two-level algorithm does
    /// not apply: fewer than 2 hosts, a host with one rank, hosts of different sizes, or ranks
    /// missing or repeated.
    pub fn new(mut hosts: Vec<Vec<usize>>) -> Option<Hierarchy> {
        let per = hosts.first()?.len();
        if hosts.len() < 2 || per < 2 || hosts.iter().any(|h| h.len() != per) {
            return None;
        }
        for h in &mut hosts {
            h.sort_unstable();
        }
        let mut all: Vec<usize> = hosts.iter().flatten().copied().collect();
        all.sort_unstable();
        if all.iter().enumerate().any(|(i, &r)| i != r) {
            return None;
        }
        Some(Hierarchy { hosts })
    }

    /// Groups ranks by a host key (e.g. the host id of each rank in rank order).
    pub fn from_host_keys<K: PartialEq>(keys: &[K]) -> Option<Hierarchy> {
        let mut distinct: Vec<&K> = Vec::new();
        let mut hosts: Vec<Vec<usize>> = Vec::new();
        for (rank, k) in keys.iter().enumerate() {
            match distinct.iter().position(|d| *d == k) {
                Some(i) => hosts[i].push(rank),
                None => {
                    distinct.push(k);
                    hosts.push(vec![rank]);
                }
            }
        }
        Hierarchy::new(hosts)
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.hosts.len() * self.hosts[0].len()
    }

    /// The ranks of `rank`'s host (in rank order) and `rank`'s index among them: the members
    /// and rank of the host's shared-memory group.
    pub fn host_of(&self, rank: usize) -> (&[usize], usize) {
        let (host, _, local) = self.rings(rank);
        (host, local)
    }

    /// `(ranks of this rank's host, ranks of its rail, its local index)`.
    pub(crate) fn rings(&self, rank: usize) -> (&[usize], Vec<usize>, usize) {
        let host = self
            .hosts
            .iter()
            .find(|h| h.contains(&rank))
            .expect("every rank is on a host");
        let local = host.iter().position(|&r| r == rank).expect("found above");
        let rail = self.hosts.iter().map(|h| h[local]).collect();
        (host, rail, local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_uniform_multi_host_layouts_qualify() {
        assert!(Hierarchy::new(vec![vec![0, 1], vec![2, 3]]).is_some());
        assert!(Hierarchy::new(vec![vec![0, 2], vec![3, 1]]).is_some());
        assert!(Hierarchy::new(vec![vec![0, 1, 2, 3]]).is_none(), "one host");
        assert!(
            Hierarchy::new(vec![vec![0], vec![1]]).is_none(),
            "one rank per host"
        );
        assert!(
            Hierarchy::new(vec![vec![0, 1], vec![2]]).is_none(),
            "uneven"
        );
        assert!(
            Hierarchy::new(vec![vec![0, 1], vec![1, 2]]).is_none(),
            "repeated"
        );
        assert!(
            Hierarchy::new(vec![vec![0, 1], vec![3, 4]]).is_none(),
            "missing"
        );
        assert!(Hierarchy::new(vec![]).is_none());
    }

    #[test]
    fn host_keys_group_ranks() {
        let h = Hierarchy::from_host_keys(&["a", "b", "a", "b"]).unwrap();
        assert_eq!(h.hosts, vec![vec![0, 2], vec![1, 3]]);
        let (host, rail, local) = h.rings(3);
        assert_eq!((host, rail, local), (&[1, 3][..], vec![2, 3], 1));
        assert!(Hierarchy::from_host_keys(&["a", "a", "b"]).is_none());
    }
}
