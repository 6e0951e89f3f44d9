//! Per-epoch metrics: JSON lines and the loss/accuracy plot (`curves.svg`, `curves.png`).

use std::{fs, io::Write, path::Path};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What one epoch achieved, as rank 0 reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// Epoch (1-based, as printed).
    pub epoch: u64,
    /// Mean training loss over the epoch's steps on this rank.
    pub train_loss: f64,
    /// Test accuracy over the whole test set (exact sharding, counts reduced over ranks): the
    /// share of its targets predicted (a language model's: of its next tokens).
    pub test_accuracy: f64,
    /// Mean cross-entropy over the test set's targets (a language model's validation loss;
    /// its perplexity is `exp` of it).
    #[serde(default)]
    pub test_loss: f64,
    /// Training samples per second, all ranks together.
    pub samples_per_s: f64,
    /// Share of step time spent waiting for gradient communication.
    pub comm_fraction: f64,
    /// Wall time of the epoch in seconds.
    pub seconds: f64,
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Writes `metrics.jsonl` (one object per epoch) into `dir`.
pub fn write_jsonl(dir: &Path, records: &[EpochRecord]) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let path = dir.join("metrics.jsonl");
    let mut f = fs::File::create(&path).map_err(|e| io(&path, e))?;
    for r in records {
        let line = serde_json::to_string(r).expect("records serialise");
        writeln!(f, "{line}").map_err(|e| io(&path, e))?;
    }
    Ok(())
}

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Draws training loss and test accuracy per epoch into `curves.svg` and `curves.png` in `dir`.
pub fn plot(dir: &Path, records: &[EpochRecord]) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    // Bitmap text needs a font; the one bundled (DejaVu Sans) is registered once.
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
    let svg = dir.join("curves.svg");
    draw(
        SVGBackend::new(&svg, (900, 420)).into_drawing_area(),
        records,
    )
    .map_err(|e| io(&svg, e))?;
    let png = dir.join("curves.png");
    draw(
        BitMapBackend::new(&png, (900, 420)).into_drawing_area(),
        records,
    )
    .map_err(|e| io(&png, e))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    records: &[EpochRecord],
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (left, right) = root.split_horizontally(450);
    let epochs = records.len().max(1) as f64;
    let max_loss = records
        .iter()
        .map(|r| r.train_loss)
        .fold(0.0f64, f64::max)
        .max(1e-6)
        * 1.1;
    let mut c = ChartBuilder::on(&left)
        .caption("training loss", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.5f64..epochs + 0.5, 0f64..max_loss)
        .map_err(e)?;
    c.configure_mesh()
        .x_desc("epoch")
        .y_desc("loss")
        .draw()
        .map_err(e)?;
    c.draw_series(LineSeries::new(
        records.iter().map(|r| (r.epoch as f64, r.train_loss)),
        &RED,
    ))
    .map_err(e)?;
    c.draw_series(
        records
            .iter()
            .map(|r| Circle::new((r.epoch as f64, r.train_loss), 3, RED.filled())),
    )
    .map_err(e)?;
    let mut c = ChartBuilder::on(&right)
        .caption("test accuracy", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.5f64..epochs + 0.5, 0f64..1.0)
        .map_err(e)?;
    c.configure_mesh()
        .x_desc("epoch")
        .y_desc("accuracy")
        .draw()
        .map_err(e)?;
    c.draw_series(LineSeries::new(
        records.iter().map(|r| (r.epoch as f64, r.test_accuracy)),
        &BLUE,
    ))
    .map_err(e)?;
    c.draw_series(
        records
            .iter()
            .map(|r| Circle::new((r.epoch as f64, r.test_accuracy), 3, BLUE.filled())),
    )
    .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_jsonl_and_plots() {
        let dir = std::env::temp_dir().join(format!("phalanx-metrics-{}", std::process::id()));
        let recs: Vec<_> = (1..=4)
            .map(|e| EpochRecord {
                epoch: e,
                train_loss: 2.0 / e as f64,
                test_accuracy: 0.5 + 0.1 * e as f64,
                test_loss: 1.5 / e as f64,
                samples_per_s: 1000.0,
                comm_fraction: 0.1,
                seconds: 1.0,
            })
            .collect();
        write_jsonl(&dir, &recs).unwrap();
        let text = fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        let back: Vec<EpochRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, recs);
        plot(&dir, &recs).unwrap();
        let png = fs::read(dir.join("curves.png")).unwrap();
        assert_eq!(&png[..4], b"\x89PNG");
        assert!(fs::read_to_string(dir.join("curves.svg"))
            .unwrap()
            .contains("test accuracy"));
        if let Some(keep) = std::env::var_os("PHALANX_KEEP_PLOT") {
            fs::copy(dir.join("curves.png"), keep).unwrap();
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
