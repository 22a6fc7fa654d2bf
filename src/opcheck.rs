//! The generic rule checked on torch's own op samples: each sample of torch's OpInfo database
//! whose forward is one ATen call, measured forward and backward with the counting allocator
//! (`python3 -m memcal_export.opcheck`, format `memcal-opcheck/1`), against the simulator's
//! generic rule for that call ([`crate::simulate::generic::rule_for`]).
//!
//! The protocol both sides follow (`exporter/memcal_export/opcheck.py`): the sample's tensors
//! are leaves; `forward` is the call with its outputs held (peak and end over the level before
//! it); `backward` is `torch.autograd.backward(outputs, ones)` with the ones made before
//! (peak and end over the level before it). The rule's side: forward makes its new outputs
//! (the node's value, the returns it saves, the returns it does not); backward makes one
//! gradient per differentiable argument that requires grad, the size of the argument (a
//! gradient that is the incoming one is copied into `.grad`, because the caller still holds
//! it), plus the formulas' temporaries and, for an argument broadcast to the output, its
//! gradient at the output's size before it is summed down.

use crate::ops::generic::AtenNode;
use crate::shape::{Dim, Shape};
use crate::simulate::generic::rule_for;
use crate::simulate::rules::{Grad, Output, Saved};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A phase's bytes over the level before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Phases {
    pub forward_peak: u64,
    pub forward_end: u64,
    /// None: not measured (no output takes a gradient).
    pub backward_peak: Option<u64>,
    pub backward_end: Option<u64>,
}

/// One sample checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub target: String,
    pub opinfo: String,
    pub measured: Phases,
    /// Err: why the rule could not be built for it.
    pub predicted: Result<Phases, String>,
}

/// How close a prediction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Closeness {
    /// Within 64 bytes.
    Exact,
    Within1,
    Off,
}

fn close(pred: u64, meas: u64) -> Closeness {
    let d = pred.abs_diff(meas);
    if d <= 64 {
        Closeness::Exact
    } else if (d as f64) <= 0.01 * meas as f64 {
        Closeness::Within1
    } else {
        Closeness::Off
    }
}

impl Checked {
    /// The worst phase's closeness, and the relative error there.
    pub fn worst(&self) -> Option<(Closeness, f64)> {
        let p = self.predicted.as_ref().ok()?;
        let m = &self.measured;
        let pairs = [
            (Some(p.forward_peak), Some(m.forward_peak)),
            (Some(p.forward_end), Some(m.forward_end)),
            (p.backward_peak, m.backward_peak),
            (p.backward_end, m.backward_end),
        ];
        let mut worst = (Closeness::Exact, 0.0f64);
        for (a, b) in pairs {
            if let (Some(a), Some(b)) = (a, b) {
                let c = close(a, b);
                let rel = (a as f64 - b as f64) / (b.max(1) as f64);
                if c > worst.0 || (c == worst.0 && rel.abs() > worst.1.abs()) {
                    worst = (c, rel);
                }
            }
        }
        Some(worst)
    }
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn shape(v: &Value) -> Option<Vec<u64>> {
    v.get("shape")?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect()
}

/// Rewrites the sample's tensor references (`{"tensor": i}`) as the node's inputs.
fn as_node_value(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("tensor") => {
            serde_json::json!({"input": o["tensor"]})
        }
        Value::Array(a) => Value::Array(a.iter().map(as_node_value).collect()),
        other => other.clone(),
    }
}

/// The generic node a sample is, with its tensors as inputs.
fn node_of(s: &Value) -> Result<AtenNode, String> {
    let mut m = Map::new();
    m.insert("target".into(), s["target"].clone());
    m.insert(
        "args".into(),
        as_node_value(s.get("args").unwrap_or(&Value::Array(vec![]))),
    );
    m.insert(
        "kwargs".into(),
        as_node_value(s.get("kwargs").unwrap_or(&Value::Object(Map::new()))),
    );
    let outputs: Vec<Value> = s["outputs"]
        .as_array()
        .ok_or("no outputs")?
        .iter()
        .map(|o| {
            let contiguous = o.get("contiguous").and_then(Value::as_bool).unwrap_or(true);
            serde_json::json!({"shape": o["shape"], "dtype": o["dtype"], "contiguous": contiguous})
        })
        .collect();
    if outputs.is_empty() {
        return Err("the op returns no tensor".into());
    }
    m.insert("outputs".into(), Value::Array(outputs));
    let mut node = AtenNode::parse(&m)?;
    node.bind(None)?;
    Ok(node)
}

fn dims(v: &[u64]) -> Shape {
    Shape(v.iter().map(|&d| Dim::fixed(d)).collect())
}

/// The rule's phases for one sample.
pub fn predict(s: &Value) -> Result<Phases, String> {
    let node = node_of(s)?;
    let tensors = s["tensors"].as_array().ok_or("no tensors")?;
    let shapes: Vec<Shape> = tensors
        .iter()
        .map(|t| shape(t).map(|v| dims(&v)).ok_or("a tensor without a shape"))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Shape> = shapes.iter().collect();
    let rule = rule_for(&node, 1, &refs);
    let out_bytes = |o: usize| node.bound[o].numel_at(1) * node.outputs[o].dtype.bytes();
    let y = out_bytes(node.item);
    let requires_grad: Vec<bool> = tensors
        .iter()
        .map(|t| t.get("requires_grad").and_then(Value::as_bool) == Some(true))
        .collect();
    let autograd = requires_grad.iter().any(|&r| r);
    let mut forward = match rule.output {
        Output::New(b) => b,
        Output::View | Output::ReshapeView => 0,
    };
    // Returns other than the node's value: saved ones are `Internal`, the rest the transient.
    forward += rule.forward_transient;
    if autograd {
        for x in &rule.saved {
            if let Saved::Internal { bytes, .. } | Saved::Kept { bytes, .. } = x {
                forward += bytes;
            }
        }
    } else {
        for x in &rule.saved {
            if let Saved::Internal { bytes, .. } = x {
                forward += bytes;
            }
        }
    }
    let measured_backward = s.get("backward").is_some_and(|b| !b.is_null());
    let (mut grads, mut broadcast) = (0u64, 0u64);
    for (i, g) in rule.grads.iter().enumerate() {
        if !requires_grad.get(i).copied().unwrap_or(false) {
            continue;
        }
        let t = &tensors[i];
        let bytes = u(t, "nbytes").unwrap_or(0);
        match g {
            Grad::None => {}
            _ => {
                grads += bytes;
                if shapes[i] != *node.shape() && matches!(g, Grad::New) {
                    broadcast = broadcast.max(y);
                }
            }
        }
    }
    let _ = out_bytes;
    Ok(Phases {
        forward_peak: forward,
        forward_end: forward,
        backward_peak: measured_backward.then(|| grads + rule.backward_transient.max(broadcast)),
        backward_end: measured_backward.then_some(grads),
    })
}

fn measured(s: &Value) -> Phases {
    let f = &s["forward"];
    let b = s.get("backward").filter(|b| !b.is_null());
    Phases {
        forward_peak: u(f, "peak").unwrap_or(0),
        forward_end: u(f, "end").unwrap_or(0),
        backward_peak: b.and_then(|b| u(b, "peak")),
        backward_end: b.and_then(|b| u(b, "end")),
    }
}

/// Checks every stable sample of a `memcal-opcheck/1` file.
pub fn check(file: &Value) -> Result<Vec<Checked>, String> {
    if file.get("format").and_then(Value::as_str) != Some("memcal-opcheck/1") {
        return Err("field `format`: expected \"memcal-opcheck/1\"".into());
    }
    let samples = file["samples"]
        .as_array()
        .ok_or("field `samples`: a list")?;
    Ok(samples
        .iter()
        .filter(|s| s.get("stable").and_then(Value::as_bool) != Some(false))
        .map(|s| Checked {
            target: s["target"].as_str().unwrap_or("?").to_string(),
            opinfo: s["opinfo"].as_str().unwrap_or("?").to_string(),
            measured: measured(s),
            predicted: predict(s),
        })
        .collect())
}

/// Per ATen op: its samples, and how many are exact / within 1% / off in their worst phase,
/// with the worst sample's error and OpInfo name (or why no rule was built).
#[derive(Debug, Default, Clone)]
pub struct OpSummary {
    pub samples: usize,
    pub exact: usize,
    pub within: usize,
    pub off: usize,
    pub no_rule: Option<String>,
    pub worst: Option<(f64, String)>,
}

/// The per-op summary, by target.
pub fn summarize(checked: &[Checked]) -> BTreeMap<String, OpSummary> {
    let mut m: BTreeMap<String, OpSummary> = BTreeMap::new();
    for c in checked {
        let e = m.entry(c.target.clone()).or_default();
        e.samples += 1;
        match (&c.predicted, c.worst()) {
            (Err(why), _) => {
                e.off += 1;
                e.no_rule.get_or_insert_with(|| why.clone());
            }
            (Ok(_), Some((cl, rel))) => {
                match cl {
                    Closeness::Exact => e.exact += 1,
                    Closeness::Within1 => e.within += 1,
                    Closeness::Off => e.off += 1,
                }
                if e.worst.as_ref().is_none_or(|(w, _)| rel.abs() > w.abs()) {
                    e.worst = Some((rel, c.opinfo.clone()));
                }
            }
            (Ok(_), None) => {}
        }
    }
    m
}

/// The summary as Markdown: the totals, then one row per op.
pub fn render(summary: &BTreeMap<String, OpSummary>) -> String {
    let ops = summary.len();
    let all_exact = summary
        .values()
        .filter(|s| s.exact == s.samples && s.samples > 0)
        .count();
    let within = summary
        .values()
        .filter(|s| s.off == 0 && s.exact < s.samples)
        .count();
    let samples: usize = summary.values().map(|s| s.samples).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{ops} ATen ops, {samples} samples: {all_exact} ops exact in every phase of every sample (within 64 bytes, {:.1}%), {within} within 1%, {} off\n",
        100.0 * all_exact as f64 / ops.max(1) as f64,
        ops - all_exact - within
    );
    let _ = writeln!(
        out,
        "| op | samples | exact | within 1% | off | worst phase error | note |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    for (op, s) in summary {
        let worst = s.worst.as_ref().map_or("-".to_string(), |(r, who)| {
            if *r == 0.0 {
                "0".to_string()
            } else {
                format!("{:+.1}% ({who})", 100.0 * r)
            }
        });
        let _ = writeln!(
            out,
            "| `{op}` | {} | {} | {} | {} | {worst} | {} |",
            s.samples,
            s.exact,
            s.within,
            s.off,
            s.no_rule.as_deref().unwrap_or("")
        );
    }
    out
}
