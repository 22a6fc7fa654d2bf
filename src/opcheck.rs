//! The generic rule checked on torch's own op samples: each sample of torch's OpInfo database
//! whose forward is one ATen call, measured forward and backward with the counting allocator
//! (`python3 -m memcal_export.opcheck`, format `memcal-opcheck/1`), against the simulator's
//! generic rule for that call ([`crate::simulate::generic::rule_for`]).
//!
//! The protocol both sides follow (`exporter/memcal_export/opcheck.py`): the sample's tensors
//! are leaves; `forward` is the call with its outputs held (peak and end over the level before
//! it); `backward` is `torch.autograd.backward(outputs, ones)` with the ones made before
//! (`ones_like`: the output's strides when it is non-overlapping and dense, else contiguous;
//! peak and end over the level before it). The rule's side: forward makes its new outputs
//! (the node's value, the returns it saves, the returns it does not); backward is the
//! engine's run of the node ([`crate::simulate::generic::engine_backward`]: the formulas'
//! results and temporaries, the sum-down of a broadcast argument's gradient, the input
//! buffer), then each leaf's `AccumulateGrad` (`torch/csrc/autograd/functions/
//! accumulate_grad.h`): a new gradient is kept as `.grad`; the incoming gradient itself is
//! cloned (the caller still holds it); a view of it is kept when it obeys the layout contract
//! (`obeys_layout_contract`), else cloned.

use crate::ops::aten::{Alias, GradResult};
use crate::ops::generic::{AtenNode, AtenValue, ElemType};
use crate::shape::{Dim, Shape};
use crate::simulate::generic::{engine_backward, rule_for_inputs, InputGrad, NodeInput};
use crate::simulate::rules::{Output, Saved};
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

/// Rewrites the sample's tensor references (`{"tensor": i}`) as the node's inputs, and its
/// non-finite floats and complex numbers (`{"float": "inf"}`, `{"complex": [re, im]}`) as
/// opaque values (memory does not depend on them).
fn as_node_value(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("tensor") => {
            serde_json::json!({"input": o["tensor"]})
        }
        Value::Object(o)
            if o.len() == 1 && (o.contains_key("float") || o.contains_key("complex")) =>
        {
            serde_json::json!({"other": v.to_string()})
        }
        Value::Array(a) => Value::Array(a.iter().map(as_node_value).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), as_node_value(v)))
                .collect(),
        ),
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
            if o.get("shape").is_none_or(Value::is_null) {
                // A number, not a tensor: no memory (drawn as an empty tensor).
                return serde_json::json!({"shape": [0], "dtype": "uint8"});
            }
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

/// Contiguous strides of `sizes`.
fn contiguous_strides(sizes: &[u64]) -> Vec<i64> {
    let mut out = vec![0i64; sizes.len()];
    let mut acc = 1i64;
    for d in (0..sizes.len()).rev() {
        out[d] = acc;
        acc *= sizes[d].max(1) as i64;
    }
    out
}

/// c10's `is_contiguous` (size-1 axes' strides do not matter).
fn is_contiguous(sizes: &[u64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for d in (0..sizes.len()).rev() {
        if sizes[d] == 0 {
            return true;
        }
        if sizes[d] != 1 {
            if strides[d] != expected {
                return false;
            }
            expected *= sizes[d] as i64;
        }
    }
    true
}

/// c10's `compute_non_overlapping_and_dense`: the axes, ordered by stride, tile the storage.
fn non_overlapping_and_dense(sizes: &[u64], strides: &[i64]) -> bool {
    if sizes.contains(&0) {
        return true;
    }
    let mut axes: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] != 1).collect();
    axes.sort_by_key(|&d| (strides[d], sizes[d]));
    let mut expected = 1i64;
    for d in axes {
        if strides[d] != expected {
            return false;
        }
        expected *= sizes[d] as i64;
    }
    true
}

/// accumulate_grad.h's `obeys_layout_contract(grad, variable)`, for a strided grad of the
/// variable's sizes: the variable's strides on its non-size-1 axes (and no stride 0) when the
/// variable is non-overlapping and dense, else a contiguous grad.
fn obeys_layout_contract(sizes: &[u64], var_strides: &[i64], grad_strides: &[i64]) -> bool {
    if grad_strides.len() != sizes.len() {
        return false;
    }
    if non_overlapping_and_dense(sizes, var_strides) {
        (0..sizes.len()).all(|d| {
            if sizes[d] != 1 {
                grad_strides[d] == var_strides[d]
            } else {
                grad_strides[d] != 0
            }
        })
    } else {
        is_contiguous(sizes, grad_strides)
    }
}

fn strides(v: &Value) -> Option<Vec<i64>> {
    v.get("strides")?
        .as_array()?
        .iter()
        .map(Value::as_i64)
        .collect()
}

/// The incoming gradient as the leaf's view sees it.
struct IncomingGrad<'a> {
    sizes: &'a [u64],
    strides: &'a [i64],
    /// The op's output is a view of its input (the schema's `Tensor(a)`): its layout came
    /// from the input's.
    output_is_view: bool,
    /// The output's dtype is the leaf's (a view across dtypes, `at::real` of a complex
    /// gradient, has other strides).
    same_dtype: bool,
    /// The op's `dim` argument (the axis `select` drops).
    dim: Option<i64>,
    /// The op's `step` argument (a slice's stride multiplier along `dim`; 1 when absent).
    step: i64,
}

/// Whether `AccumulateGrad` keeps the formula's view of the incoming gradient as the leaf's
/// `.grad` (no copy) for leaf `t`.
fn view_is_kept(r: GradResult, t: &Value, g: &IncomingGrad) -> bool {
    let (Some(sizes), Some(var)) = (shape(t), strides(t)) else {
        return false;
    };
    let (g_sizes, g_strides) = (g.sizes, g.strides);
    if !g.same_dtype {
        return false;
    }
    let numel = |s: &[u64]| s.iter().product::<u64>();
    match r {
        // The caller holds the incoming gradient: its use count is above 1.
        GradResult::Grad | GradResult::New => false,
        // All of the incoming gradient, the output's layout undone: the leaf's layout when
        // the output is a view of a dense leaf (ones_like preserves its strides); of a new
        // output, the gradient's strides on the same non-size-1 axes in order (size-1 axes
        // added or dropped), which a permutation does not keep.
        GradResult::View if g.output_is_view => non_overlapping_and_dense(&sizes, &var),
        GradResult::View => {
            let big = |s: &[u64]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
            if big(&sizes) != big(g_sizes) {
                return false;
            }
            let mut from_g = g_sizes
                .iter()
                .zip(g_strides)
                .filter(|(d, _)| **d != 1)
                .map(|(_, s)| *s);
            let view: Vec<i64> = sizes
                .iter()
                .map(|&d| {
                    if d != 1 {
                        from_g.next().unwrap_or(0)
                    } else {
                        1
                    }
                })
                .collect();
            obeys_layout_contract(&sizes, &var, &view)
        }
        // An expand that broadcasts nothing is a plain view; else stride 0.
        GradResult::Expand => {
            numel(&sizes) == numel(g_sizes) && non_overlapping_and_dense(&sizes, &var)
        }
        // A contiguous incoming gradient reshaped: a contiguous view.
        GradResult::Reshape => {
            is_contiguous(g_sizes, g_strides)
                && obeys_layout_contract(&sizes, &var, &contiguous_strides(&sizes))
        }
        // A block of the incoming gradient, with its strides (an axis dropped by select).
        GradResult::Part => {
            let view: Vec<i64> = if sizes.len() == g_sizes.len() {
                // A slice with a step strides its axis `step` times the gradient's.
                let mut v = g_strides.to_vec();
                if let (true, Some(d)) = (g.step != 1, g.dim) {
                    let r = v.len() as i64;
                    let d = if d < 0 { d + r } else { d };
                    if let Some(x) = usize::try_from(d).ok().and_then(|d| v.get_mut(d)) {
                        *x *= g.step;
                    }
                }
                v
            } else if let (true, Some(d)) = (sizes.len() + 1 == g_sizes.len(), g.dim) {
                let r = g_sizes.len() as i64;
                let d = if d < 0 { d + r } else { d };
                g_strides
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| k as i64 != d)
                    .map(|(_, &s)| s)
                    .collect()
            } else {
                // A diagonal: strides summed.
                return false;
            };
            obeys_layout_contract(&sizes, &var, &view)
        }
    }
}

/// The rule's phases for one sample.
pub fn predict(s: &Value) -> Result<Phases, String> {
    let node = node_of(s)?;
    let tensors = s["tensors"].as_array().ok_or("no tensors")?;
    let shapes: Vec<Shape> = tensors
        .iter()
        .map(|t| shape(t).map(|v| dims(&v)).ok_or("a tensor without a shape"))
        .collect::<Result<_, _>>()?;
    let requires_grad: Vec<bool> = tensors
        .iter()
        .map(|t| t.get("requires_grad").and_then(Value::as_bool) == Some(true))
        .collect();
    // A gradient is dense: the tensor's elements at its dtype's size.
    let dense_bytes: Vec<u64> = tensors
        .iter()
        .zip(&shapes)
        .map(|(t, sh)| {
            let e = t
                .get("dtype")
                .and_then(Value::as_str)
                .and_then(ElemType::parse)
                .map_or(4, ElemType::bytes);
            sh.numel_at(1) * e
        })
        .collect();
    let inputs: Vec<NodeInput> = shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| NodeInput {
            shape,
            bytes: dense_bytes[i],
            requires_grad: requires_grad[i],
        })
        .collect();
    let rule = rule_for_inputs(&node, 1, &inputs);
    let autograd = requires_grad.iter().any(|&r| r);
    let mut forward = match rule.output {
        Output::New(b) => b,
        Output::View | Output::ReshapeView => 0,
    };
    // A `Tensor[]` return is drawn one node per item (the exporter's `item`): a call whose
    // list is new (no alias annotation) makes every item, the other items' nodes' values.
    let mut other_items = 0u64;
    if let [r] = node.op.returns {
        if r.list && r.alias == Alias::None {
            for (k, o) in node
                .outputs
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != node.item)
            {
                let n = node.bound.get(k).map_or(0, |sh| sh.numel_at(1));
                other_items += n.saturating_mul(o.dtype.bytes());
            }
        }
    }
    forward += other_items;
    // Returns other than the node's value: saved ones are `Internal`, the rest the transient.
    forward += rule.forward_transient;
    for x in &rule.saved {
        match x {
            Saved::Internal { bytes, .. } => forward += bytes,
            Saved::Kept { bytes, .. } if autograd => forward += bytes,
            Saved::InternalFor { bytes, j, .. }
                if inputs.get(*j).is_some_and(|x| x.requires_grad) =>
            {
                forward += bytes
            }
            _ => {}
        }
    }
    let measured_backward = s.get("backward").is_some_and(|b| !b.is_null());
    let backward = measured_backward.then(|| {
        let engine = engine_backward(&node, 1, &inputs);
        // The incoming gradient: ones_like(output), the output's strides when dense.
        let out = &s["outputs"][node.item];
        let g_sizes = shape(out).unwrap_or_default();
        let g_strides = match strides(out) {
            Some(st) if non_overlapping_and_dense(&g_sizes, &st) => st,
            _ => contiguous_strides(&g_sizes),
        };
        let dim = node
            .op
            .args
            .iter()
            .position(|x| x.name == "dim")
            .and_then(|k| match node.arg(k) {
                Some(AtenValue::Int(d)) => Some(*d),
                // Left out: its schema default, 0 for every `dim` of a Part formula's op
                // (stack, unbind, cat).
                None if node.op.args[k].has_default => Some(0),
                _ => None,
            });
        let step = node
            .op
            .args
            .iter()
            .position(|x| x.name == "step")
            .and_then(|k| match node.arg(k) {
                Some(AtenValue::Int(s)) => Some(*s),
                _ => None,
            })
            .unwrap_or(1);
        let out_dtype = out.get("dtype").and_then(Value::as_str);
        let mut live = engine.new_bytes();
        let mut peak = engine.peak;
        for (i, g) in engine.inputs.iter().enumerate() {
            if let InputGrad::OfGrad(r) = g {
                let incoming = IncomingGrad {
                    sizes: &g_sizes,
                    strides: &g_strides,
                    output_is_view: node.output_is_view(),
                    same_dtype: tensors[i].get("dtype").and_then(Value::as_str) == out_dtype,
                    dim,
                    step,
                };
                if !view_is_kept(*r, &tensors[i], &incoming) {
                    // clone_obey_contract: a new tensor of the leaf's size.
                    live += dense_bytes[i];
                    peak = peak.max(live);
                }
            }
        }
        (peak, live)
    });
    Ok(Phases {
        forward_peak: forward.max(rule.forward_peak.unwrap_or(0) + other_items),
        forward_end: forward,
        backward_peak: backward.map(|b| b.0),
        backward_end: backward.map(|b| b.1),
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
