//! Learning-rate schedules: PyTorch's `CosineAnnealingLR` (to 0 at the last step) and `StepLR`
//! (× gamma every N epochs), after a linear warm-up (`LinearLR` from lr/warmup to lr).

/// The shape of the schedule after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ScheduleKind {
    /// The base learning rate throughout.
    #[default]
    Constant,
    /// Half a cosine from the base rate down to 0 over the steps after warm-up.
    Cosine,
    /// × `gamma` every `epochs` epochs.
    Step {
        /// Epochs between decays (at least 1).
        epochs: u64,
        /// The factor of each decay.
        gamma: f64,
    },
}

/// A schedule: its shape and the warm-up before it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LrSchedule {
    /// The shape after warm-up.
    pub kind: ScheduleKind,
    /// Steps of linear warm-up, from `lr / warmup_steps` to `lr` (0: none).
    pub warmup_steps: u64,
}

impl LrSchedule {
    /// Parses `--lr-schedule`: `constant`, `cosine`, `step` (× 0.1 every 30 epochs, PyTorch's
    /// usual), or `step:EPOCHS[:GAMMA]`.
    pub fn parse_kind(s: &str) -> Result<ScheduleKind, String> {
        let mut parts = s.trim().split(':');
        let name = parts.next().unwrap_or_default().to_ascii_lowercase();
        let bad = || {
            format!(
                "unknown learning-rate schedule {s:?}: expected constant, cosine, step or \
                 step:EPOCHS[:GAMMA] (e.g. step:10:0.5)"
            )
        };
        let kind = match name.as_str() {
            "constant" => ScheduleKind::Constant,
            "cosine" => ScheduleKind::Cosine,
            "step" => {
                let epochs = match parts.next() {
                    Some(e) => e.parse::<u64>().ok().filter(|&e| e > 0).ok_or_else(bad)?,
                    None => 30,
                };
                let gamma = match parts.next() {
                    Some(g) => g
                        .parse::<f64>()
                        .ok()
                        .filter(|g| g.is_finite() && *g > 0.0)
                        .ok_or_else(bad)?,
                    None => 0.1,
                };
                ScheduleKind::Step { epochs, gamma }
            }
            _ => return Err(bad()),
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(kind)
    }

    /// The learning rate of step `step` (0-based over the run) for base rate `base`.
    pub fn lr(&self, base: f64, step: u64, steps_per_epoch: u64, total_steps: u64) -> f64 {
        if step < self.warmup_steps {
            return base * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.kind {
            ScheduleKind::Constant => base,
            ScheduleKind::Cosine => {
                let span = total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let t = (step - self.warmup_steps) as f64 / span;
                base * 0.5 * (1.0 + (std::f64::consts::PI * t.min(1.0)).cos())
            }
            ScheduleKind::Step { epochs, gamma } => {
                let epoch = step / steps_per_epoch.max(1);
                base * gamma.powi((epoch / epochs) as i32)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_zero() {
        let s = LrSchedule {
            kind: ScheduleKind::Cosine,
            warmup_steps: 4,
        };
        assert_eq!(s.lr(1.0, 0, 10, 104), 0.25);
        assert_eq!(s.lr(1.0, 3, 10, 104), 1.0);
        assert_eq!(s.lr(1.0, 4, 10, 104), 1.0);
        assert!((s.lr(1.0, 54, 10, 104) - 0.5).abs() < 1e-12);
        assert!(s.lr(1.0, 104, 10, 104).abs() < 1e-12);
    }

    #[test]
    fn step_decays_every_n_epochs() {
        let s = LrSchedule {
            kind: LrSchedule::parse_kind("step:2:0.5").unwrap(),
            warmup_steps: 0,
        };
        assert_eq!(s.lr(1.0, 19, 10, 100), 1.0);
        assert_eq!(s.lr(1.0, 20, 10, 100), 0.5);
        assert_eq!(s.lr(1.0, 45, 10, 100), 0.25);
    }

    #[test]
    fn bad_schedules_are_named() {
        for bad in ["linear", "step:0", "step:2:-1", "cosine:3", "step:x"] {
            let err = LrSchedule::parse_kind(bad).unwrap_err();
            assert!(err.contains(bad) && err.contains("expected"), "{err}");
        }
        assert_eq!(
            LrSchedule::parse_kind("step").unwrap(),
            ScheduleKind::Step {
                epochs: 30,
                gamma: 0.1
            }
        );
    }
}
