//! `--tee`'s value: which standard streams of which local ranks go to the `--log-dir` files,
//! in torchrun's syntax (`3`, or `0:1,1:2` per local rank).

use std::str::FromStr;

/// A set of standard streams, torchrun's bit mask: 1 = stdout, 2 = stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Streams(u8);

impl Streams {
    /// Neither stream.
    pub const NONE: Streams = Streams(0);
    /// Standard output only.
    pub const STDOUT: Streams = Streams(1);
    /// Standard error only.
    pub const STDERR: Streams = Streams(2);
    /// Both streams.
    pub const BOTH: Streams = Streams(3);

    /// Whether standard output is in the set.
    pub fn stdout(self) -> bool {
        self.0 & 1 != 0
    }

    /// Whether standard error is in the set.
    pub fn stderr(self) -> bool {
        self.0 & 2 != 0
    }

    fn parse(text: &str) -> Result<Streams, String> {
        match text.trim().parse::<u8>() {
            Ok(v) if v <= 3 => Ok(Streams(v)),
            _ => Err(format!(
                "{text:?} is not a stream mask (0 none, 1 stdout, 2 stderr, 3 both)"
            )),
        }
    }
}

impl std::ops::BitOr for Streams {
    type Output = Streams;

    fn bitor(self, other: Streams) -> Streams {
        Streams(self.0 | other.0)
    }
}

/// The value of `--tee`: one mask for every local rank, or one per local rank (`0:1,1:2`;
/// ranks not listed get none), exactly as torchrun's `-t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tee {
    /// The same streams for every local rank.
    All(Streams),
    /// `(local_rank, streams)` pairs.
    PerRank(Vec<(u32, Streams)>),
}

impl Tee {
    /// The streams teed for `local_rank`.
    pub fn for_local_rank(&self, local_rank: u32) -> Streams {
        match self {
            Tee::All(s) => *s,
            Tee::PerRank(v) => v
                .iter()
                .find(|(lr, _)| *lr == local_rank)
                .map_or(Streams::NONE, |(_, s)| *s),
        }
    }
}

impl FromStr for Tee {
    type Err = String;

    fn from_str(text: &str) -> Result<Tee, String> {
        if !text.contains(':') {
            return Streams::parse(text).map(Tee::All);
        }
        text.split(',')
            .map(|pair| {
                let (lr, mask) = pair
                    .split_once(':')
                    .ok_or_else(|| format!("{pair:?}: expected LOCAL_RANK:MASK"))?;
                let lr = lr
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{lr:?} is not a local rank"))?;
                Ok((lr, Streams::parse(mask)?))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(Tee::PerRank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tee_forms() {
        assert_eq!("3".parse::<Tee>().unwrap(), Tee::All(Streams::BOTH));
        assert_eq!("0".parse::<Tee>().unwrap(), Tee::All(Streams::NONE));
        let t: Tee = "0:1,1:2".parse().unwrap();
        assert_eq!(t.for_local_rank(0), Streams::STDOUT);
        assert_eq!(t.for_local_rank(1), Streams::STDERR);
        assert_eq!(t.for_local_rank(2), Streams::NONE);
        assert!("4".parse::<Tee>().is_err());
        assert!("0:1,x:2".parse::<Tee>().is_err());
        assert!("0:9".parse::<Tee>().is_err());
    }
}
