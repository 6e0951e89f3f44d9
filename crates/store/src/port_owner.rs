//! Who holds a TCP port, for "port already in use" errors (Linux `/proc`; elsewhere `None`).

use std::fs;

/// `"pid 1234 (python3)"` for the process listening on `port`, when it can be found cheaply.
pub(crate) fn find(port: u16) -> Option<String> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in fs::read_dir("/proc").ok()?.flatten() {
        let name = proc_entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            let holds = link
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode));
            if holds {
                let comm = fs::read_to_string(proc_entry.path().join("comm")).unwrap_or_default();
                return Some(format!("pid {pid} ({})", comm.trim()));
            }
        }
    }
    Some("another process (not visible to this user)".to_string())
}

/// Socket inodes in LISTEN state (`0A`) on `port`, from the text of `/proc/net/tcp{,6}`.
pub(crate) fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7CBC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0
   1: 0100007F:7CBC 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn finds_listening_inode_only() {
        assert_eq!(listening_inodes(SAMPLE, 0x7CBC), vec![123456]);
        assert_eq!(listening_inodes(SAMPLE, 22), vec![999]);
        assert!(listening_inodes(SAMPLE, 80).is_empty());
        assert!(listening_inodes("garbage\nmore garbage", 80).is_empty());
    }

    #[test]
    fn finds_this_process() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if std::path::Path::new("/proc/net/tcp").exists() {
            let owner = find(port).unwrap();
            assert!(owner.contains(&std::process::id().to_string()), "{owner}");
        }
    }
}
