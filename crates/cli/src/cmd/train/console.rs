//! What `phalanx train` prints: [`Console`], the [`Reporter`] that renders the progress
//! bar or the epoch lines on rank 0 (every rank's summary), and `--json`'s lines, one JSON
//! object per event.

use std::{io::IsTerminal, time::Instant};

use phalanx_checkpoint::Meta;
use phalanx_train::{metrics, metrics::EpochRecord, Reporter, Summary};

/// Renders progress: rank 0 prints, others stay quiet (their failures speak for them).
pub(super) struct Console {
    rank: usize,
    world: usize,
    json: bool,
    epochs: u64,
    bar: Option<indicatif::ProgressBar>,
    /// The launcher draws the bar from our progress records (PHALANX_PROGRESS=1).
    records_to_launcher: bool,
    samples_per_step: usize,
    last_line: Instant,
    last_step: u64,
    started: Instant,
    records: Vec<EpochRecord>,
    /// A language model's tokens per sample (its --seq-len): its test loss is a validation
    /// loss, reported with its perplexity, and its rate in tokens.
    language_model: Option<usize>,
}

impl Console {
    /// `exp(loss)` for a language model.
    fn perplexity(&self, loss: f64) -> Option<f64> {
        self.language_model.map(|_| loss.exp())
    }

    fn tokens_per_sample(&self) -> f64 {
        self.language_model.unwrap_or(1) as f64
    }

    pub(super) fn new(
        rank: usize,
        world: usize,
        json: bool,
        epochs: u64,
        batch_size: usize,
        language_model: Option<usize>,
    ) -> Console {
        let bar = (rank == 0 && !json && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "epoch {prefix} [{bar:30}] {pos}/{len} steps  {msg}  ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        });
        let records_to_launcher = bar.is_none()
            && rank == 0
            && !json
            && std::env::var("PHALANX_PROGRESS").is_ok_and(|v| v == "1");
        Console {
            rank,
            world,
            json,
            epochs,
            bar,
            records_to_launcher,
            samples_per_step: batch_size * world,
            last_line: Instant::now(),
            last_step: 0,
            started: Instant::now(),
            records: Vec::new(),
            language_model,
        }
    }

    pub(super) fn finish(
        &mut self,
        s: &Summary,
        out: Option<&std::path::Path>,
    ) -> anyhow::Result<()> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.json {
            // Serialized, not formatted: a non-finite figure becomes `null`, never invalid JSON.
            print_json(&SummaryLine {
                event: "summary",
                rank: s.rank,
                world: s.world,
                epochs: s.epochs,
                train_loss: s.train_loss,
                test_accuracy: s.test_accuracy,
                test_loss: s.test_loss,
                perplexity: self.perplexity(s.test_loss),
                samples_per_s: s.samples_per_s,
                comm_fraction: s.comm_fraction,
                param_digest: &s.param_digest,
                pipeline_bubble: s.pipeline_bubble.map(|b| b.measured),
                pipeline_bubble_theory: s.pipeline_bubble.map(|b| b.theory),
                pipeline_imbalance: s.pipeline_bubble.map(|b| b.imbalance),
                pipeline_idle: s.pipeline_bubble.map(|b| b.idle),
                outer_syncs: s.outer.map(|o| o.syncs),
                outer_bytes_across: s.outer.map(|o| o.bytes_across),
            });
        } else if self.rank == 0 && self.language_model.is_some() {
            println!(
                "done: {} epoch(s) in {:.1} s, train loss {:.4}, val loss {:.4}, perplexity {:.2}, {:.0} tokens/s on {} rank(s), {:.0}% of step time in communication, parameters {}",
                s.epochs,
                self.started.elapsed().as_secs_f64(),
                s.train_loss,
                s.test_loss,
                s.test_loss.exp(),
                s.samples_per_s * self.tokens_per_sample(),
                s.world,
                100.0 * s.comm_fraction,
                &s.param_digest[..16]
            );
        } else if self.rank == 0 {
            println!(
                "done: {} epochs in {:.1} s, test accuracy {:.2}%, {:.0} samples/s on {} rank(s), {:.0}% of step time in communication, parameters {}",
                s.epochs,
                self.started.elapsed().as_secs_f64(),
                100.0 * s.test_accuracy,
                s.samples_per_s,
                s.world,
                100.0 * s.comm_fraction,
                &s.param_digest[..16]
            );
        }
        if let (Some(dir), 0) = (out, self.rank) {
            metrics::write_jsonl(dir, &s.records)?;
            metrics::plot(dir, &s.records)?;
            if !self.json {
                println!(
                    "wrote {}/metrics.jsonl, curves.png, curves.svg",
                    dir.display()
                );
            }
        }
        Ok(())
    }
}

impl Reporter for Console {
    fn step(&mut self, epoch: u64, step: u64, steps: u64, loss: f32) {
        if self.rank != 0 || self.json {
            return;
        }
        if let Some(b) = &self.bar {
            b.set_length(steps);
            b.set_position(step);
            b.set_prefix(format!("{}/{}", epoch + 1, self.epochs));
            b.set_message(format!("loss {loss:.4}"));
        } else if self.records_to_launcher {
            let dt = self.last_line.elapsed().as_secs_f64();
            if dt > 0.1 || step == steps {
                self.last_line = Instant::now();
                let rate = self.samples_per_step as f64
                    * (if step >= self.last_step {
                        step - self.last_step
                    } else {
                        step
                    }) as f64
                    / dt.max(1e-9);
                self.last_step = step;
                println!(
                    "{}{step} {steps} epoch {}/{}\tloss {loss:.4} {rate:.0} samples/s",
                    String::from_utf8_lossy(phalanx_launch::progress::MARKER),
                    epoch + 1,
                    self.epochs
                );
            }
        } else if self.last_line.elapsed().as_secs_f64() > 5.0 {
            // Through a launcher the output is a pipe: a line every few seconds instead of a bar.
            self.last_line = Instant::now();
            println!(
                "epoch {}/{} step {step}/{steps} loss {loss:.4}",
                epoch + 1,
                self.epochs
            );
        }
    }

    fn epoch(&mut self, r: &EpochRecord) {
        self.records.push(r.clone());
        if self.rank != 0 {
            return;
        }
        if self.json {
            print_json(&EpochLine {
                event: "epoch",
                epoch: r.epoch,
                world: self.world,
                train_loss: r.train_loss,
                test_accuracy: r.test_accuracy,
                test_loss: r.test_loss,
                perplexity: self.perplexity(r.test_loss),
                samples_per_s: r.samples_per_s,
                comm_fraction: r.comm_fraction,
                seconds: r.seconds,
            });
            return;
        }
        let line = if self.language_model.is_some() {
            format!(
                "epoch {:>3}/{}  loss {:.4}  val loss {:.4}  perplexity {:7.2}  next-token acc {:6.2}%  {:>8.0} tokens/s  comm {:4.1}%  ({:.2} s)",
                r.epoch,
                self.epochs,
                r.train_loss,
                r.test_loss,
                r.test_loss.exp(),
                100.0 * r.test_accuracy,
                r.samples_per_s * self.tokens_per_sample(),
                100.0 * r.comm_fraction,
                r.seconds
            )
        } else {
            format!(
            "epoch {:>3}/{}  loss {:.4}  test acc {:6.2}%  {:>8.0} samples/s  comm {:4.1}%  ({:.2} s)",
            r.epoch,
            self.epochs,
            r.train_loss,
            100.0 * r.test_accuracy,
            r.samples_per_s,
            100.0 * r.comm_fraction,
            r.seconds
        )
        };
        match &self.bar {
            Some(b) => b.println(line),
            None => println!("{line}"),
        }
    }

    fn checkpoint(&mut self, path: &std::path::Path) {
        tracing::info!(path = %path.display(), "checkpoint saved");
    }

    fn checkpoint_skipped(&mut self, d: &phalanx_checkpoint::Damaged) {
        eprintln!(
            "phalanx train: warning: skipping a damaged checkpoint (resuming from an older one): {}",
            d.error
        );
    }

    fn nothing_to_resume(&mut self, dir: &std::path::Path) {
        eprintln!(
            "phalanx train: --resume: no checkpoint in {}; starting from the beginning",
            dir.display()
        );
    }

    fn regrouped(&mut self, r: &phalanx_train::Regrouped) {
        // Every rank says it on stderr (a survivor's view and the replacement's); rank 0 also
        // in the run's own output.
        eprintln!(
            "phalanx train: rank {}: generation {}: process group re-formed with ranks {:?} of \
             {}, step {} completed {:.2} s after {} (state from rank {})",
            self.rank,
            r.generation,
            r.members,
            // The slots the round has had: its first world, and any admitted node's after it.
            r.members
                .iter()
                .map(|&m| m + 1)
                .max()
                .unwrap_or(0)
                .max(self.world),
            r.position.global_step,
            r.seconds,
            if r.replacement {
                "this replacement joined"
            } else {
                "the change"
            },
            r.members.get(r.source).copied().unwrap_or(r.source)
        );
        if self.rank == 0 && self.json {
            print_json(&RegroupedLine {
                event: "regrouped",
                generation: r.generation,
                ranks: r.members.len(),
                source: r.members.get(r.source).copied().unwrap_or(r.source),
                global_step: r.position.global_step,
                seconds: r.seconds,
            });
        }
    }

    fn resumed(&mut self, m: &Meta) {
        if self.json && self.rank == 0 {
            print_json(&ResumedLine {
                event: "resumed",
                global_step: m.global_step,
                epoch: m.epoch + 1,
                step_in_epoch: m.step_in_epoch,
            });
        }
        if !self.json {
            // The ranks that wrote it: a cut model's pieces come from every rank of the world,
            // while `world_size` counts the data-parallel ranks the position is sharded over.
            let writers = m
                .sharded
                .as_ref()
                .map_or(m.world_size, |s| s.shards.len() as u64);
            println!(
                "resumed from step {} (epoch {}, step {} of it), saved by {writers} rank(s)",
                m.global_step,
                m.epoch + 1,
                m.step_in_epoch,
            );
        }
    }
}

/// `--json`'s line at the end of a run, one per rank (fields in this order).
#[derive(serde::Serialize)]
struct SummaryLine<'a> {
    event: &'static str,
    rank: usize,
    world: usize,
    epochs: u64,
    /// The last epoch's mean loss, or that of the steps run of it under --max-steps.
    train_loss: f64,
    test_accuracy: f64,
    test_loss: f64,
    /// A language model's: `exp(test_loss)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    perplexity: Option<f64>,
    samples_per_s: f64,
    comm_fraction: f64,
    param_digest: &'a str,
    /// Under `--pp`: the share of its steps the busiest stage did not compute, measured (Note
    /// [The measured bubble] in phalanx-train).
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_bubble: Option<f64>,
    /// Under `--pp`: the schedule's bubble in theory, `(p − 1) / (v·m + p − 1)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_bubble_theory: Option<f64>,
    /// Under `--pp`: how much less the lightest stage computed than the busiest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_imbalance: Option<f64>,
    /// Under `--pp`: the share of its steps this rank did not compute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_idle: Option<f64>,
    /// Under `--outer`: the outer syncs run.
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_syncs: Option<u64>,
    /// Under `--outer`: the bytes this rank sent across islands in them.
    #[serde(skip_serializing_if = "Option::is_none")]
    outer_bytes_across: Option<u64>,
}

/// `--json`'s line after a regroup (rank 0): fault tolerance recovered from a dead rank.
#[derive(serde::Serialize)]
struct RegroupedLine {
    event: &'static str,
    generation: u64,
    ranks: usize,
    source: usize,
    global_step: u64,
    seconds: f64,
}

/// `--json`'s line when training resumed from a checkpoint (rank 0).
#[derive(serde::Serialize)]
struct ResumedLine {
    event: &'static str,
    global_step: u64,
    epoch: u64,
    step_in_epoch: u64,
}

/// `--json`'s line per epoch (rank 0).
#[derive(serde::Serialize)]
struct EpochLine {
    event: &'static str,
    epoch: u64,
    world: usize,
    train_loss: f64,
    test_accuracy: f64,
    test_loss: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    perplexity: Option<f64>,
    samples_per_s: f64,
    comm_fraction: f64,
    seconds: f64,
}

fn print_json(line: &impl serde::Serialize) {
    match serde_json::to_string(line) {
        Ok(text) => println!("{text}"),
        Err(e) => tracing::error!("--json: {e}"),
    }
}
