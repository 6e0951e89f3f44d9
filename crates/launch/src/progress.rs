//! A progress bar on the launcher's terminal, drawn from rank 0's progress records.
//!
//! Workers' output reaches the user through line-prefixing pipes, where a bar that redraws
//! one line cannot work. So when the launcher's stderr is a terminal it sets
//! `PHALANX_PROGRESS=1` for the workers; a worker (`phalanx train`, rank 0) then writes
//! records `ESC PHX-PROGRESS <pos> <len> <prefix>\t<message>` which the launcher renders as an
//! indicatif bar instead of printing them. Other output is printed above the bar.

use std::sync::OnceLock;

/// Start of a progress record (ESC keeps it from ever matching ordinary output).
pub const MARKER: &[u8] = b"\x1bPHX-PROGRESS ";

static BAR: OnceLock<Option<indicatif::ProgressBar>> = OnceLock::new();

/// Whether the launcher draws progress bars (its stderr is a terminal).
pub(crate) fn enabled() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

fn bar() -> Option<&'static indicatif::ProgressBar> {
    BAR.get_or_init(|| {
        enabled().then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} {msg} ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        })
    })
    .as_ref()
}

/// Handles a progress record; false when `line` is not one.
pub(crate) fn handle(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(MARKER) else {
        return false;
    };
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.splitn(3, ' ');
    let (pos, len, tail) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
    if let (Some(b), Some(pos), Some(len)) = (
        bar(),
        pos.and_then(|p| p.parse().ok()),
        len.and_then(|l| l.parse().ok()),
    ) {
        let (prefix, msg) = tail.split_once('\t').unwrap_or((tail, ""));
        if b.length() != Some(len) || pos < b.position() {
            b.reset();
            b.set_length(len);
        }
        b.set_position(pos);
        b.set_prefix(prefix.to_string());
        b.set_message(msg.to_string());
    }
    true
}

/// Runs `write` with the bar hidden, so ordinary lines appear above it.
pub(crate) fn around<R>(write: impl FnOnce() -> R) -> R {
    match BAR.get().and_then(Option::as_ref) {
        Some(b) if !b.is_finished() => b.suspend(write),
        _ => write(),
    }
}

/// Removes the bar at the end of the job.
pub(crate) fn finish() {
    if let Some(b) = BAR.get().and_then(Option::as_ref) {
        b.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_recognised_and_swallowed() {
        assert!(handle(b"\x1bPHX-PROGRESS 3 10 epoch 1/5\tloss 0.1"));
        assert!(handle(b"\x1bPHX-PROGRESS garbage"));
        assert!(!handle(b"epoch 1/5 loss 0.1"));
    }
}
