//! The measurement protocol: one run = one graph, one batch, one device, one precision.
//!
//! Phases, in order: `model_load`, `inputs`, then for k = 1..3 `stepk.forward`, `stepk.backward`,
//! `stepk.optimizer` (AdamW step, then `zero_grad`, which sets gradients to None as torch does by
//! default). For each phase: synchronize, read allocated and reserved, reset the peak, run,
//! synchronize, read both peaks and both end levels. A torch error inside a phase (tch raises it as
//! a panic, or returns it) ends the run: an out-of-memory error gives `status: oom`, anything else
//! `status: error`; the failed phase is recorded with its start levels and wall time, and no phase
//! after it is written.

use crate::builder::Model;
use crate::counters::Backend;
use crate::strategies::{Protocol, Tape};
use memcal::graph::Graph;
use memcal::run::{Failure, Peak, Phase, RunRow, RunStatus};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tch::nn::OptimizerConfig;

/// Precision profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything in float32.
    Fp32,
    /// float32 weights, bfloat16 autocast around the forward pass.
    Bf16Autocast,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Precision, String> {
        match s {
            "fp32" => Ok(Precision::Fp32),
            "bf16-autocast" => Ok(Precision::Bf16Autocast),
            other => Err(format!(
                "unknown precision `{other}` (known: fp32, bf16-autocast)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16Autocast => "bf16-autocast",
        }
    }
}

/// Number of AdamW steps in a run.
pub const STEPS: usize = 3;
/// Learning rate of the AdamW steps (the value does not change memory).
pub const LEARNING_RATE: f64 = 1e-4;
/// Seed of `tch::manual_seed` before the model is built.
pub const SEED: i64 = 0;

/// What a run produced: the phases, the outcome and the built parameter count.
pub struct Outcome {
    pub phases: Vec<Phase>,
    pub status: RunStatus,
    pub failure: Option<Failure>,
    pub built_parameters: Option<u64>,
}

/// The text of a caught panic (tch's `unwrap` of a torch error carries torch's message).
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "a panic without a message".to_string()
    }
}

/// Torch's error text without the wrappers tch adds (`called Result::unwrap() on an Err value:
/// Torch("...")`, `Internal torch error: `) and without the C++ stack trace that follows
/// "Exception raised from".
pub fn clean_error(text: &str) -> String {
    let mut t = text.trim().to_string();
    if let Some(rest) = t.strip_prefix("called `Result::unwrap()` on an `Err` value: ") {
        t = rest.to_string();
    }
    for wrapper in ["Torch(\"", "Shape(\"", "Kind(\""] {
        if let Some(inner) = t.strip_prefix(wrapper).and_then(|r| r.strip_suffix("\")")) {
            t = inner
                .replace("\\n", "\n")
                .replace("\\\"", "\"")
                .replace("\\'", "'");
        }
    }
    if let Some(rest) = t.strip_prefix("Internal torch error: ") {
        t = rest.to_string();
    }
    if let Some(at) = t.find("Exception raised from") {
        t.truncate(at);
    }
    t.trim().to_string()
}

/// True when an error text is an out-of-memory error: the CUDA caching allocator ("CUDA out of
/// memory"), the counting allocator's cap ("CPU out of memory"), the default CPU allocator when
/// the system allocator fails ("not enough memory"), or a cuBLAS/cuDNN workspace allocation that
/// failed (`*_STATUS_ALLOC_FAILED`).
pub fn is_oom(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("out of memory")
        || t.contains("not enough memory")
        || t.contains("status_alloc_failed")
}

/// Installs a panic hook that stays quiet for torch errors (they are recorded in the row) and
/// prints anything else to stderr with its location.
pub fn install_quiet_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        if !msg.contains("Torch(") && !is_oom(&msg) {
            let loc = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            eprintln!("memcal-measure: panic{loc}: {msg}");
        }
    }));
}

struct Runner {
    backend: Backend,
    phases: Vec<Phase>,
    failure: Option<(RunStatus, Failure)>,
}

impl Runner {
    /// Runs one phase under the allocator protocol. Returns None when the phase failed (the
    /// failure is recorded and no further phase may run).
    fn phase<T>(&mut self, name: &str, f: impl FnOnce() -> anyhow::Result<T>) -> Option<T> {
        if self.failure.is_some() {
            return None;
        }
        let start = Instant::now();
        let setup = (|| -> Result<_, String> {
            self.backend.synchronize()?;
            let r = self.backend.read()?;
            self.backend.reset_peak()?;
            Ok(r)
        })();
        let before = match setup {
            Ok(r) => r,
            Err(e) => {
                self.failure = Some((
                    RunStatus::Error,
                    Failure {
                        phase: name.to_string(),
                        message: format!("reading the allocator: {e}"),
                    },
                ));
                return None;
            }
        };
        let result = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(clean_error(&format!("{e:#}"))),
            Err(p) => Err(clean_error(&panic_text(p))),
        };
        let finish = self.backend.synchronize().and_then(|_| self.backend.read());
        let wall = start.elapsed().as_secs_f64();
        let mut phase = Phase {
            name: name.to_string(),
            status: "ok".into(),
            allocated_start: before.allocated,
            reserved_start: before.reserved,
            allocated_peak: None,
            reserved_peak: None,
            allocated_end: None,
            reserved_end: None,
            wall_seconds: wall,
        };
        match (result, finish) {
            (Ok(v), Ok(after)) => {
                phase.allocated_peak = Some(after.allocated_peak);
                phase.reserved_peak = Some(after.reserved_peak);
                phase.allocated_end = Some(after.allocated);
                phase.reserved_end = Some(after.reserved);
                self.phases.push(phase);
                Some(v)
            }
            (Ok(_), Err(e)) | (Err(e), _) => {
                let status = if is_oom(&e) {
                    RunStatus::Oom
                } else {
                    RunStatus::Error
                };
                phase.status = if status == RunStatus::Oom {
                    "oom"
                } else {
                    "error"
                }
                .into();
                self.phases.push(phase);
                self.failure = Some((
                    status,
                    Failure {
                        phase: name.to_string(),
                        message: e,
                    },
                ));
                None
            }
        }
    }
}

/// Runs the protocol for `graph` at `batch` (plain training). Never panics on a torch error.
pub fn run(graph: &Graph, batch: u64, backend: Backend, precision: Precision) -> Outcome {
    run_with(graph, batch, backend, precision, None)
}

/// Runs the protocol under a strategy ([`crate::strategies`]); `None`: plain training.
pub fn run_with(
    graph: &Graph,
    batch: u64,
    backend: Backend,
    precision: Precision,
    strategy: Option<&Protocol>,
) -> Outcome {
    tch::manual_seed(SEED);
    let mut r = Runner {
        backend,
        phases: Vec::new(),
        failure: None,
    };
    let device = backend.tch_device();
    if let Some(p) = strategy.filter(|p| p.inference.is_some()) {
        return run_inference(r, graph, batch, device, p);
    }
    let plain = Protocol {
        checkpoint_every: None,
        low_rank: None,
        inference: None,
        zero1_world: None,
    };
    let proto = strategy.unwrap_or(&plain);
    let stages = crate::strategies::stages(graph, proto);

    // The optimizer is created with the model (it holds no tensors until its first step):
    // over the adapters alone under LoRA/QLoRA.
    let mut built_parameters = None;
    let loaded = r.phase("model_load", || {
        let mut model = Model::build(graph, device)?;
        built_parameters = Some(model.built_parameters());
        if let Some((rank, quantize)) = proto.low_rank {
            crate::strategies::apply_low_rank(&mut model, rank, quantize)?;
        }
        let opt = match &model.adapters {
            Some(a) => tch::nn::AdamW::default().build(a, LEARNING_RATE)?,
            None => tch::nn::AdamW::default().build(&model.vs, LEARNING_RATE)?,
        };
        Ok((model, opt))
    });
    let inputs = loaded
        .as_ref()
        .and_then(|(m, _)| r.phase("inputs", || m.inputs(batch)));
    let mut sharded = proto.zero1_world.map(crate::strategies::ShardedAdamW::new);
    if let (Some((model, mut opt)), Some(inputs)) = (loaded, inputs) {
        for k in 1..=STEPS {
            let loss = r.phase(&format!("step{k}.forward"), || {
                let autocast = precision == Precision::Bf16Autocast;
                if autocast {
                    backend.autocast(true).map_err(anyhow::Error::msg)?;
                }
                let out = catch_unwind(AssertUnwindSafe(|| match &stages {
                    None => (model.forward(&inputs, batch), None),
                    Some(s) => {
                        let (loss, tape) = Tape::forward(&model, &inputs, batch, s);
                        (loss, Some(tape))
                    }
                }));
                if autocast {
                    backend.autocast(false).map_err(anyhow::Error::msg)?;
                }
                match out {
                    Ok(loss) => Ok(loss),
                    Err(p) => Err(anyhow::anyhow!(panic_text(p))),
                }
            });
            let Some((loss, tape)) = loss else { break };
            // A plain run keeps the loss (and what its op holds, e.g. mse's input-sized buffer)
            // until the backward phase has ended, dropping it before the optimizer phase
            // (docs/simulator.md, "loss drop"; the committed single-op rows were measured so);
            // a staged run's tape takes the loss.
            let phase = format!("step{k}.backward");
            let done = match tape {
                None => {
                    let done = r.phase(&phase, || {
                        loss.f_backward()?;
                        Ok(())
                    });
                    drop(loss);
                    done
                }
                Some(t) => r.phase(&phase, || t.backward(&model, loss, batch)),
            };
            if done.is_none() {
                break;
            }
            let stepped = r.phase(&format!("step{k}.optimizer"), || {
                match sharded.as_mut() {
                    Some(s) => s.step(&model.vs.trainable_variables(), LEARNING_RATE),
                    None => opt.step(),
                }
                opt.zero_grad();
                Ok(())
            });
            if stepped.is_none() {
                break;
            }
        }
    }
    finish(r, built_parameters)
}

fn finish(r: Runner, built_parameters: Option<u64>) -> Outcome {
    let (status, failure) = match r.failure {
        None => (RunStatus::Completed, None),
        Some((s, f)) => (s, Some(f)),
    };
    Outcome {
        phases: r.phases,
        status,
        failure,
        built_parameters,
    }
}

/// The inference protocol's phases: `model_load`, `inputs` (the prompt), `prefill` (the caches
/// allocated and the prompt run), `decode` (the decode steps).
fn run_inference(
    mut r: Runner,
    graph: &Graph,
    batch: u64,
    device: tch::Device,
    p: &Protocol,
) -> Outcome {
    let (prompt, decode) = p.inference.expect("an inference protocol");
    let model = r.phase("model_load", || Model::build(graph, device));
    let built = model.as_ref().map(|m| m.built_parameters());
    let tokens = model.as_ref().and_then(|m| {
        r.phase("inputs", || {
            crate::inference::prompt_tokens(m, batch, prompt)
        })
    });
    if let (Some(m), Some(t)) = (&model, tokens) {
        let state = r.phase("prefill", || {
            Ok(crate::inference::prefill(m, &t, decode, batch))
        });
        drop(t);
        if let Some(mut s) = state {
            r.phase("decode", || {
                crate::inference::decode(m, &mut s, decode, batch);
                Ok(())
            });
        }
    }
    finish(r, built)
}

/// The overall peak of completed phases: the highest allocated peak (with its phase) and the
/// highest reserved peak.
pub fn overall_peak(phases: &[Phase]) -> Option<Peak> {
    let mut best: Option<Peak> = None;
    for p in phases {
        let (Some(a), Some(rv)) = (p.allocated_peak, p.reserved_peak) else {
            continue;
        };
        match &mut best {
            None => {
                best = Some(Peak {
                    allocated_bytes: a,
                    reserved_bytes: rv,
                    phase: p.name.clone(),
                })
            }
            Some(b) => {
                if a > b.allocated_bytes {
                    b.allocated_bytes = a;
                    b.phase = p.name.clone();
                }
                b.reserved_bytes = b.reserved_bytes.max(rv);
            }
        }
    }
    best
}

/// Fills a row's outcome fields from an [`Outcome`].
pub fn apply_outcome(row: &mut RunRow, out: &Outcome) {
    row.phases = out.phases.clone();
    row.status = out.status;
    match out.status {
        RunStatus::Completed => row.peak = overall_peak(&out.phases),
        RunStatus::Oom => row.oom = out.failure.clone(),
        RunStatus::Error => row.error = out.failure.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, peak: Option<u64>, reserved: Option<u64>) -> Phase {
        Phase {
            name: name.into(),
            status: if peak.is_some() { "ok" } else { "oom" }.into(),
            allocated_start: 0,
            reserved_start: 0,
            allocated_peak: peak,
            reserved_peak: reserved,
            allocated_end: peak,
            reserved_end: reserved,
            wall_seconds: 0.0,
        }
    }

    #[test]
    fn overall_peak_takes_the_highest_phase() {
        let p = overall_peak(&[
            phase("a", Some(5), Some(9)),
            phase("b", Some(7), Some(8)),
            phase("c", None, None),
        ])
        .unwrap();
        assert_eq!(
            (p.allocated_bytes, p.reserved_bytes, p.phase.as_str()),
            (7, 9, "b")
        );
        assert!(overall_peak(&[phase("x", None, None)]).is_none());
    }

    #[test]
    fn errors_are_cleaned_and_classified() {
        let raw = "called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. Tried to allocate 2.00 GiB\\nException raised from malloc at x.cpp:1\\nframe #0\")";
        assert_eq!(
            clean_error(raw),
            "CUDA out of memory. Tried to allocate 2.00 GiB"
        );
        assert!(is_oom(&clean_error(raw)));
        let cpu = "Internal torch error: CPU out of memory: tried to allocate 24576 bytes\nException raised from allocate";
        assert_eq!(
            clean_error(cpu),
            "CPU out of memory: tried to allocate 24576 bytes"
        );
        assert!(!is_oom(
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"
        ));
        assert_eq!(
            Precision::parse("bf16-autocast"),
            Ok(Precision::Bf16Autocast)
        );
        assert!(Precision::parse("fp16").is_err());
    }
}
