//! `phalanx doctor`'s flags, and the limits they set for the checks.

use std::path::PathBuf;
use std::time::Duration;

use super::data::Limits;
use crate::cmd::sizes;

/// Check that a job can run with these launch flags: the interface and address each rank
/// would use, reachability of every peer (both directions), every link's RTT and bandwidth,
/// shared memory, clock skew against rank 0, then a real process group and one allreduce.
/// Node 0 prints the report ending with the slowest link; every node exits non-zero when a
/// check fails. Every launch flag can also be set as PET_<FLAG>.
// This doc comment is the subcommand's --help text, printed as written: `<FLAG>` is no HTML.
#[allow(rustdoc::invalid_html_tags)]
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) launch: phalanx_launch::LaunchArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// How long a rank tries to connect to a peer before calling it unreachable.
    #[arg(long, default_value = "3s", value_parser = duration)]
    pub(crate) connect_timeout: Duration,
    /// How long each link is measured, per direction.
    #[arg(long, default_value = "200ms", value_parser = duration)]
    pub(crate) bandwidth_time: Duration,
    /// At most this many bytes per link and direction (`64M`).
    #[arg(long, default_value = "64M", value_parser = size)]
    pub(crate) bandwidth_bytes: usize,
    /// Fail when a rank's clock differs from rank 0's by more than this.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub(crate) max_clock_skew: Duration,
    /// Fail when a link is slower than this (`10gbit`, `800mbit`).
    #[arg(long, value_parser = rate)]
    pub(crate) min_bandwidth: Option<f64>,
    /// Where a worker leaves the report for the `phalanx doctor` that launched it.
    #[arg(long, hide = true)]
    pub(crate) report_file: Option<PathBuf>,
}

const EXAMPLES: &str = "\
Examples:
  phalanx doctor --standalone --nproc-per-node 4
  PHALANX_TOKEN=$SECRET phalanx doctor --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 \\
      --nproc-per-node 4                               (and --node-rank 1 on the other host)
  PHALANX_SOCKET_IFNAME=eth1 phalanx doctor --standalone --nproc-per-node 2 --json

Exit status: 0 when every check passed (warnings allowed); 1 when a check failed (the report
names it: an unreachable peer, an interface that matches nothing, a clock beyond
--max-clock-skew, a link below --min-bandwidth, a process group that failed); otherwise the
launcher's status. Full manual: docs/doctor.md.";

impl Args {
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_clock_skew_us: self.max_clock_skew.as_secs_f64() * 1e6,
            min_gbps: self.min_bandwidth,
            bandwidth_ms: self.bandwidth_time.as_secs_f64() * 1e3,
            bandwidth_bytes: self.bandwidth_bytes,
        }
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    phalanx_core::parse_duration(s).map_err(|e| e.to_string())
}

fn size(s: &str) -> Result<usize, String> {
    match sizes::parse_size(s) {
        Ok(0) => Err("must be at least 1 byte".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `10gbit`, `800mbit`, `500kbit`, `1.5g` → Gbit/s.
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("rate {s:?}: expected a number and a unit, like 10gbit"))?;
    let scale = match unit
        .trim_end_matches("/s")
        .trim_end_matches("bit")
        .trim_end_matches("bps")
    {
        "g" => 1.0,
        "m" => 1e-3,
        "k" => 1e-6,
        _ => return Err(format!("rate {s:?}: unknown unit (use gbit, mbit or kbit)")),
    };
    Ok(v * scale)
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_parse_in_gbit_per_second() {
        assert_eq!(rate("10gbit"), Ok(10.0));
        assert_eq!(rate("800mbit"), Ok(0.8));
        assert_eq!(rate("1.5G"), Ok(1.5));
        assert_eq!(rate("500kbit/s"), Ok(0.0005));
        assert!(rate("fast").is_err());
        assert!(rate("10 parsecs").is_err());
    }
}
