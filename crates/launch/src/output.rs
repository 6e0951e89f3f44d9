//! Worker output: one thread per stream reads whole lines, writes them to the agent's own
//! stdout or stderr behind a `[rank N]: ` prefix (one locked write per line, so ranks never
//! interleave mid-line), copies them to the `--log-dir` file when teed, and remembers the
//! last line for the failure summary.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest line kept whole; a longer run without a newline is emitted in pieces of this size.
const MAX_LINE: usize = 64 * 1024;
/// Longest "last line" kept for the summary.
const MAX_SUMMARY_LINE: usize = 300;

/// Which of the agent's streams a worker stream is copied to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Console {
    Stdout,
    Stderr,
}

/// Where one worker stream goes.
pub(crate) struct Sink {
    /// `[rank N]: `.
    pub(crate) prefix: Vec<u8>,
    /// The agent stream to copy to; `None` when `--local-ranks-filter` hides this rank.
    pub(crate) console: Option<Console>,
    /// The `--log-dir` file when this stream is teed.
    pub(crate) file: Option<File>,
}

/// A running pump: its thread and the last non-empty line it saw.
pub(crate) struct Pump {
    thread: Option<JoinHandle<()>>,
    last: Arc<Mutex<Option<String>>>,
}

impl Pump {
    /// Starts copying `reader` (a worker's stdout or stderr pipe) to `sink`.
    pub(crate) fn start(reader: impl Read + Send + 'static, sink: Sink) -> Pump {
        let last = Arc::new(Mutex::new(None));
        let last2 = Arc::clone(&last);
        let thread = std::thread::Builder::new()
            .name("phalanx-launch-output".into())
            .spawn(move || pump(reader, sink, &last2))
            .expect("spawning an output thread");
        Pump {
            thread: Some(thread),
            last,
        }
    }

    /// The last non-empty line so far (trimmed, at most 300 characters).
    pub(crate) fn last_line(&self) -> Option<String> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until the stream reaches its end, at most until `deadline`; whether it did.
    /// A grandchild that escaped the worker's process group can hold the pipe open forever,
    /// so the agent never waits unboundedly here.
    pub(crate) fn finish_by(&mut self, deadline: Instant) -> bool {
        let Some(t) = &self.thread else { return true };
        while !t.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        true
    }
}

fn pump(reader: impl Read, mut sink: Sink, last: &Mutex<Option<String>>) {
    let mut r = BufReader::with_capacity(16 * 1024, reader);
    let mut line = Vec::with_capacity(256);
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            if !line.is_empty() {
                emit(&mut sink, &line, last);
            }
            break;
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..=i]);
                r.consume(i + 1);
                emit(&mut sink, &line, last);
                line.clear();
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
                if line.len() >= MAX_LINE {
                    emit(&mut sink, &line, last);
                    line.clear();
                }
            }
        }
    }
}

fn emit(sink: &mut Sink, line: &[u8], last: &Mutex<Option<String>>) {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    if crate::progress::handle(body) {
        return;
    }
    if let Some(f) = &mut sink.file {
        let _ = f.write_all(body).and_then(|()| f.write_all(b"\n"));
    }
    if let Some(console) = sink.console {
        let mut out = Vec::with_capacity(sink.prefix.len() + body.len() + 1);
        out.extend_from_slice(&sink.prefix);
        out.extend_from_slice(body);
        out.push(b'\n');
        // One write under the stream's lock: lines of different ranks never interleave.
        // A closed console (EPIPE) must not stop the worker, so errors are ignored.
        let _ = crate::progress::around(|| match console {
            Console::Stdout => {
                let mut o = std::io::stdout().lock();
                o.write_all(&out).and_then(|()| o.flush())
            }
            Console::Stderr => std::io::stderr().lock().write_all(&out),
        });
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if !text.is_empty() && !is_cpp_backtrace(text) {
        let cut: String = text.chars().take(MAX_SUMMARY_LINE).collect();
        *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(cut);
    }
}

/// Whether `line` belongs to the C++ backtrace PyTorch appends to an exception's message
/// (`Exception raised from recvBytes at …`, `frame #3: …`, `<omitting python frames>`). The
/// failure summary skips these lines, so that a PyTorch worker's summary is its exception
/// (`torch.distributed.DistNetworkError: Connection reset by peer`), not its 34th frame.
fn is_cpp_backtrace(line: &str) -> bool {
    line.starts_with("frame #")
        || line.starts_with("Exception raised from ")
        || line == "<omitting python frames>"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pytorch_exception_is_the_last_line_not_its_cpp_frames() {
        let text = "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n\
                    torch.distributed.DistNetworkError: Connection reset by peer\n\
                    Exception raised from recvBytes at Utils.hpp:783 (most recent call first):\n\
                    frame #0: c10::Error::Error() + 0x9d (0x7f in libc10.so)\n\
                    <omitting python frames>\nframe #34: _start + 0x21\n\n";
        let sink = Sink {
            prefix: Vec::new(),
            console: None,
            file: None,
        };
        let mut p = Pump::start(text.as_bytes(), sink);
        assert!(p.finish_by(Instant::now() + Duration::from_secs(5)));
        assert_eq!(
            p.last_line().as_deref(),
            Some("torch.distributed.DistNetworkError: Connection reset by peer")
        );
    }

    #[test]
    fn keeps_last_non_empty_line_and_writes_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let sink = Sink {
            prefix: b"[rank 0]: ".to_vec(),
            console: None,
            file: Some(File::create(&path).unwrap()),
        };
        let mut p = Pump::start(&b"one\ntwo\n\n  three  \n\npartial"[..], sink);
        assert!(p.finish_by(Instant::now() + Duration::from_secs(5)));
        assert_eq!(p.last_line().as_deref(), Some("partial"));
        let written = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written, "one\ntwo\n\n  three  \n\npartial\n");
    }

    #[test]
    fn long_lines_are_split_not_buffered_forever() {
        let data = vec![b'x'; MAX_LINE * 2];
        let sink = Sink {
            prefix: Vec::new(),
            console: None,
            file: None,
        };
        let mut p = Pump::start(std::io::Cursor::new(data), sink);
        assert!(p.finish_by(Instant::now() + Duration::from_secs(5)));
        assert_eq!(p.last_line().unwrap().len(), MAX_SUMMARY_LINE);
    }
}
