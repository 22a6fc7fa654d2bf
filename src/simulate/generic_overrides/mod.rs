//! Per-op facts the generic rule ([`super::generic`]) cannot read off torch's tables: buffers a
//! CPU kernel allocates and frees inside the call (forward kernel scratch), and the
//! temporaries of a `FunctionsManual.cpp` helper the table's generator cannot see into or
//! counts as one expression (backward).
//!
//! One [`Override`] per ATen op, holding all its facts: adding an op touches one place (an
//! entry in one of the [`TABLES`]). Each entry is read from torch's source (the file and function are cited in
//! `read_from`) and gives its bytes as a function of the call's shapes, dtypes and arguments;
//! none is a number picked to match a measurement. What an entry still approximates (a layout
//! it assumes, a branch it does not follow) is in its `approximates`, which `memcal plan`
//! reports ([`approximation`]).

use crate::ops::generic::{AtenNode, AtenValue};
use crate::shape::Shape;

/// One input of a generic node as the rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct NodeInput<'a> {
    pub shape: &'a Shape,
    /// Its bytes as a dense tensor (the size of a gradient made for it).
    pub bytes: u64,
    /// Whether its gradient is computed (the generated backward node skips a formula whose
    /// arguments need none: `task_should_compute_output`).
    pub requires_grad: bool,
}

/// A call of a generic node as an override sees it: the node (its arguments and outputs) and
/// its inputs, at one batch size.
pub struct Call<'a> {
    pub node: &'a AtenNode,
    pub batch: u64,
    pub inputs: &'a [NodeInput<'a>],
}

impl Call<'_> {
    fn arg_index(&self, name: &str) -> Option<usize> {
        self.node.op.args.iter().position(|a| a.name == name)
    }

    fn value(&self, name: &str) -> Option<&AtenValue> {
        self.node.arg(self.arg_index(name)?)
    }

    /// The node input schema argument `name` holds.
    fn input(&self, name: &str) -> Option<&NodeInput<'_>> {
        match self.value(name)? {
            AtenValue::Input(i) => self.inputs.get(*i),
            _ => None,
        }
    }

    /// The sizes of tensor argument `name` (empty when it is not a node input).
    pub fn dims(&self, name: &str) -> Vec<u64> {
        self.input(name)
            .map(|x| x.shape.0.iter().map(|d| d.at(self.batch)).collect())
            .unwrap_or_default()
    }

    /// Elements of tensor argument `name`.
    pub fn numel(&self, name: &str) -> u64 {
        self.input(name).map_or(0, |x| x.shape.numel_at(self.batch))
    }

    /// Bytes of one element of tensor argument `name` (4 when it has none to tell by).
    pub fn elem(&self, name: &str) -> u64 {
        match self.input(name) {
            Some(x) if x.shape.numel_at(self.batch) > 0 => x.bytes / x.shape.numel_at(self.batch),
            _ => self.out_elem(0),
        }
    }

    /// Bytes of tensor argument `name` (dense).
    pub fn bytes(&self, name: &str) -> u64 {
        self.input(name).map_or(0, |x| x.bytes)
    }

    /// Int argument `name` as given (None: left at its default, or not an int).
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.value(name)? {
            AtenValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Int-list argument `name` as given (empty: left out).
    pub fn ints(&self, name: &str) -> Vec<i64> {
        match self.value(name) {
            Some(AtenValue::List(l)) => l
                .iter()
                .filter_map(|v| match v {
                    AtenValue::Int(i) => Some(*i),
                    _ => None,
                })
                .collect(),
            Some(AtenValue::Int(i)) => vec![*i],
            _ => Vec::new(),
        }
    }

    /// Bool argument `name` (None: left at its default).
    pub fn flag(&self, name: &str) -> Option<bool> {
        match self.value(name)? {
            AtenValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// String argument `name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.value(name)? {
            AtenValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Sizes of return `o`.
    pub fn out_dims(&self, o: usize) -> Vec<u64> {
        self.node
            .bound
            .get(o)
            .map(|s| s.0.iter().map(|d| d.at(self.batch)).collect())
            .unwrap_or_default()
    }

    /// Elements of return `o`.
    pub fn out_numel(&self, o: usize) -> u64 {
        self.node.bound.get(o).map_or(0, |s| s.numel_at(self.batch))
    }

    /// Bytes of one element of return `o`.
    pub fn out_elem(&self, o: usize) -> u64 {
        self.node.outputs.get(o).map_or(4, |x| x.dtype.bytes())
    }

    /// Bytes of return `o`.
    pub fn out_bytes(&self, o: usize) -> u64 {
        self.out_numel(o).saturating_mul(self.out_elem(o))
    }
}

/// A dim argument wrapped into `0..rank` (`maybe_wrap_dim`; a 0-dim tensor takes 0 and -1).
pub fn wrap(dim: i64, rank: usize) -> usize {
    let r = rank.max(1) as i64;
    (if dim < 0 { dim + r } else { dim }).clamp(0, r - 1) as usize
}

/// Contiguous strides of `dims`.
pub fn contiguous_strides(dims: &[u64]) -> Vec<u64> {
    let mut out = vec![1u64; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        out[d] = out[d + 1].saturating_mul(dims[d + 1].max(1));
    }
    out
}

/// The facts of one op the generic rule takes from here.
pub struct Override {
    /// `<op>.<overload>`, as the table names it (`sort.default`).
    pub op: &'static str,
    /// The torch source the entry was read from: file and function.
    pub read_from: &'static str,
    /// Bytes at the forward call's highest point over its end (its returns all made): the
    /// kernel's buffers freed before it returns.
    pub forward_scratch: Option<fn(&Call) -> u64>,
    /// The bytes a gradient formula holds at its highest point besides its results (the
    /// generic rule's "temporaries"), for the formula of the schema argument named; None: the
    /// generic count stands.
    pub backward_temporaries: Option<fn(&Call, &str) -> Option<u64>>,
    /// What the entry still approximates, in words (reported by `memcal plan`).
    pub approximates: Option<&'static str>,
}

mod formulas;
mod kernels;
mod linalg;

/// The tables, each sorted by op name: this file's, then one per op family ([`formulas`],
/// [`kernels`], [`linalg`]). An op has one entry in one of them.
pub static TABLES: &[&[Override]] = &[
    OVERRIDES,
    formulas::OVERRIDES,
    kernels::OVERRIDES,
    linalg::OVERRIDES,
];

/// The entry of `op` (`sort.default`), if any.
pub fn lookup(op: &str) -> Option<&'static Override> {
    TABLES
        .iter()
        .find_map(|t| t.binary_search_by(|o| o.op.cmp(op)).ok().map(|k| &t[k]))
}

/// The forward scratch of this call (0 without an entry).
pub fn forward_scratch(call: &Call) -> u64 {
    lookup(call.node.op.name)
        .and_then(|o| o.forward_scratch)
        .map_or(0, |f| f(call))
}

/// The temporaries of the formula for argument `arg` of this call, where an entry gives them.
pub fn backward_temporaries(call: &Call, arg: &str) -> Option<u64> {
    lookup(call.node.op.name)
        .and_then(|o| o.backward_temporaries)
        .and_then(|f| f(call, arg))
}

/// Whether the entry of `a` gives its gradient formulas' temporaries (a helper the table's
/// generator could not see into is then counted).
pub fn covers_backward(a: &AtenNode) -> bool {
    lookup(a.op.name).is_some_and(|o| o.backward_temporaries.is_some())
}

/// What the generic rule approximates for `a`, in words: the table's own limits
/// ([`AtenNode::approximation`]; a hidden helper's temporaries no longer, where an entry gives
/// them), then what the entry itself approximates.
pub fn approximations(a: &AtenNode) -> Vec<String> {
    use crate::ops::aten::AtenAutograd;
    let covered = covers_backward(a)
        && !a.op.composite
        && matches!(a.op.autograd, AtenAutograd::Formulas { .. });
    let mut v: Vec<String> = a.approximation().filter(|_| !covered).into_iter().collect();
    if let Some(o) = lookup(a.op.name) {
        if let Some(t) = o.approximates {
            v.push(format!("aten.{}: {t} ({})", a.op.name, o.read_from));
        }
    }
    v
}

/// `_fill_indices` (aten/src/ATen/native/Sorting.cpp): `at::arange(0, dim_size, kLong)`,
/// restrided and copied into the indices.
fn fill_indices(dim_size: u64) -> u64 {
    dim_size.saturating_mul(8)
}

/// sort's scratch (both overloads): `values.copy_(self)` into the output, then sort_kernel's
/// `_fill_indices`: an arange of the sorted axis in int64 (nothing for a 0-dim input).
fn sort_scratch(c: &Call) -> u64 {
    let d = c.dims("self");
    if d.is_empty() {
        return 0;
    }
    fill_indices(d[wrap(c.int("dim").unwrap_or(-1), d.len())])
}

/// clamp_min/clamp_max.Tensor's backward: `where(<comparison>, grad, at::scalar_tensor(0.,
/// grad.options()))`: a bool of the broadcast shape and a 0-dim zero of grad's dtype.
fn clamp_tensor_backward(c: &Call, _: &str) -> Option<u64> {
    Some(c.out_numel(0) + c.out_elem(0))
}

/// fmax/fmin's backward: `grad.masked_fill((<comparison>).logical_or_(other.isnan()), 0)`
/// (`.logical_not_()` for self, in place): a bool of the broadcast shape and one of other's.
fn fmax_fmin_backward(c: &Call, _: &str) -> Option<u64> {
    Some(c.out_numel(0) + c.numel("other"))
}

/// maximum/minimum's backward: `at::where(self == other, grad / 2, grad).masked_fill_(<strict
/// comparison>, 0)`: two bools of the broadcast shape and `grad / 2` (the output's size), all
/// alive until the statement ends (the where is the result).
fn maximum_minimum_backward(c: &Call, _: &str) -> Option<u64> {
    Some(2 * c.out_numel(0) + c.out_bytes(0))
}

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "clamp_max.Tensor",
        read_from: "derivatives.yaml clamp_max.Tensor",
        forward_scratch: None,
        backward_temporaries: Some(clamp_tensor_backward),
        approximates: None,
    },
    Override {
        op: "clamp_min.Tensor",
        read_from: "derivatives.yaml clamp_min.Tensor",
        forward_scratch: None,
        backward_temporaries: Some(clamp_tensor_backward),
        approximates: None,
    },
    Override {
        op: "copysign.Tensor",
        read_from: "FunctionsManual.cpp: copysign_tensor_self_backward; BinaryOps.cpp: eq.Scalar (wrapped_scalar_tensor)",
        forward_scratch: None,
        // self: `ratio = result / self` (the output's size); `ratio.masked_fill_(self == 0,
        // 0)`: a bool of self's size and the comparison's wrapped int64 scalar, gone by the
        // next statement; `grad * ratio` beside ratio. other: `zeros_like(other)`, nothing
        // more. The highest of the statements, over the result.
        backward_temporaries: Some(|c, arg| {
            if arg != "self" {
                return Some(0);
            }
            let ratio = c.out_numel(0) * c.out_elem(0);
            Some((c.numel("self") + 8).max(ratio))
        }),
        approximates: None,
    },
    Override {
        op: "fmax.default",
        read_from: "derivatives.yaml fmax; TensorCompare.cpp: isnan (`self != self`)",
        forward_scratch: None,
        backward_temporaries: Some(fmax_fmin_backward),
        approximates: None,
    },
    Override {
        op: "fmin.default",
        read_from: "derivatives.yaml fmin; TensorCompare.cpp: isnan (`self != self`)",
        forward_scratch: None,
        backward_temporaries: Some(fmax_fmin_backward),
        approximates: None,
    },
    Override {
        op: "kthvalue.default",
        read_from: "aten/src/ATen/native/Sorting.cpp: kthvalue_out_impl_cpu",
        // `tmp_values = self.clone(Contiguous)`, `tmp_indices = at::empty(self.sizes(), kLong)`
        // (a 0-dim input copies straight into the outputs).
        forward_scratch: Some(|c| {
            if c.dims("self").is_empty() {
                return 0;
            }
            let n = c.numel("self");
            n.saturating_mul(c.elem("self")) + n.saturating_mul(8)
        }),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "logsumexp.default",
        read_from: "aten/src/ATen/native/ReduceOps.cpp: logsumexp_out_impl; FunctionsManual.cpp: logsumexp_backward",
        // `maxes = at::amax(at::real(self), dims, true)` (the reduced shape), then
        // `maxes_squeezed.masked_fill_(maxes_squeezed.abs() == INFINITY, 0)`: an `abs` and a
        // bool of the reduced shape, and the comparison's wrapped double scalar (8 bytes,
        // BinaryOps.cpp's `eq.Scalar` meta: `wrapped_scalar_tensor`); then
        // `at::sum_out(result, (self - maxes).exp_(), ...)`: `self - maxes` beside `maxes`
        // and the result. The highest of the two statements, over the result.
        forward_scratch: Some(|c| {
            let (m, e) = (c.out_numel(0), c.out_elem(0));
            let first = m * e + m * e + m + 8;
            let second = m * e + c.numel("self") * e;
            first.max(second)
        }),
        // `grad * (self - result).exp().conj()`: `self - result` and its `exp` (the input's
        // size; `conj` of a real tensor is itself), both alive as the product is made.
        backward_temporaries: Some(|c, _| Some(2 * c.numel("self") * c.elem("self"))),
        approximates: None,
    },
    Override {
        op: "maximum.default",
        read_from: "derivatives.yaml maximum",
        forward_scratch: None,
        backward_temporaries: Some(maximum_minimum_backward),
        approximates: None,
    },
    Override {
        op: "minimum.default",
        read_from: "derivatives.yaml minimum",
        forward_scratch: None,
        backward_temporaries: Some(maximum_minimum_backward),
        approximates: None,
    },
    Override {
        op: "nanmedian.dim",
        read_from: "aten/src/ATen/native/Sorting.cpp: median_with_indices_impl",
        // The reduced axis made innermost: `in.unsqueeze(-1).transpose_(dim, -1)
        // .squeeze_(dim).contiguous()` when `in.stride(dim) > 1` (an input taken as
        // contiguous: the axes after `dim` hold more than one element).
        forward_scratch: Some(|c| {
            let d = c.dims("self");
            if d.is_empty() {
                return 0;
            }
            let dim = wrap(c.int("dim").unwrap_or(0), d.len());
            if contiguous_strides(&d)[dim] > 1 {
                c.bytes("self")
            } else {
                0
            }
        }),
        backward_temporaries: None,
        approximates: Some("the input's layout is taken as contiguous (a strided input's copy is not drawn)"),
    },
    Override {
        op: "roll.default",
        read_from: "aten/src/ATen/native/TensorTransformations.h: roll_common; derivatives.yaml roll",
        // Several dims: `first_dim_rolled = roll(self, shifts[0], dims[0])`, then
        // `at::roll(first_dim_rolled, tail...)`, recursively: every dim but the last leaves an
        // input-sized tensor alive until the output is made. One dim (or none: a flattened
        // contiguous view) rolls straight into the output.
        forward_scratch: Some(|c| {
            let k = c.ints("dims").len() as u64;
            k.saturating_sub(1) * c.bytes("self")
        }),
        // `grad.roll(fmap(reverse_integers(shifts)), dims)`: the same chain on the gradient.
        backward_temporaries: Some(|c, _| {
            let k = c.ints("dims").len() as u64;
            Some(k.saturating_sub(1) * c.out_bytes(0))
        }),
        approximates: None,
    },
    Override {
        op: "sort.default",
        read_from: "aten/src/ATen/native/Sorting.cpp: sort_stable_out, _fill_indices (cpu/SortingKernel.cpp: sort_kernel)",
        forward_scratch: Some(sort_scratch),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "sort.stable",
        read_from: "aten/src/ATen/native/Sorting.cpp: sort_stable_out (the stable overload), _fill_indices (cpu/SortingKernel.cpp: sort_kernel)",
        forward_scratch: Some(sort_scratch),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "special_xlog1py.default",
        read_from: "derivatives.yaml special_xlog1py",
        forward_scratch: None,
        // other: `grad * self / (other + 1)`: the product (the output's size) and `other + 1`
        // (other's). self: `at::special_xlog1py(grad, other).masked_fill((self == 0.) &
        // (other <= -1.), 0.)`: the xlog1py (the output's size), a bool of self's size, one
        // of other's and their `&` (the broadcast shape).
        backward_temporaries: Some(|c, arg| {
            let (n, e) = (c.out_numel(0), c.out_elem(0));
            Some(if arg == "other" {
                n * e + c.numel("other") * c.elem("other")
            } else {
                n * e + c.numel("self") + c.numel("other") + n
            })
        }),
        approximates: None,
    },
    Override {
        op: "xlogy.Tensor",
        read_from: "derivatives.yaml xlogy.Tensor",
        forward_scratch: None,
        // other: `grad * self / other`: the product (the output's size). self:
        // `at::xlogy(grad, other).masked_fill((self == 0.) & (other <= 0.), 0.)`: the xlogy
        // (the output's size), a bool of self's size, one of other's and their `&` (the
        // broadcast shape).
        backward_temporaries: Some(|c, arg| {
            let (n, e) = (c.out_numel(0), c.out_elem(0));
            Some(if arg == "other" {
                n * e
            } else {
                n * e + c.numel("self") + c.numel("other") + n
            })
        }),
        approximates: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_names_a_table_op_once() {
        let all: Vec<&Override> = TABLES.iter().flat_map(|t| t.iter()).collect();
        for (k, o) in all.iter().enumerate() {
            assert!(
                crate::ops::aten::lookup(o.op).is_some(),
                "{} is not in the ATen table",
                o.op
            );
            assert!(all[..k].iter().all(|p| p.op != o.op), "{} twice", o.op);
            assert!(!o.read_from.is_empty(), "{} cites no source", o.op);
        }
    }

    #[test]
    fn the_tables_are_sorted() {
        for t in TABLES {
            for w in t.windows(2) {
                assert!(w[0].op < w[1].op, "{} then {}", w[0].op, w[1].op);
            }
        }
    }

    #[test]
    fn dims_wrap_and_strides_are_contiguous() {
        assert_eq!(wrap(-1, 3), 2);
        assert_eq!(wrap(0, 0), 0);
        assert_eq!(contiguous_strides(&[5, 10, 5]), vec![50, 5, 1]);
    }
    fn node(target: &str, args: serde_json::Value, shape: &[u64], dtypes: &[&str]) -> AtenNode {
        let outputs: Vec<serde_json::Value> = dtypes
            .iter()
            .map(|d| serde_json::json!({"shape": shape, "dtype": d}))
            .collect();
        let v = serde_json::json!({"target": target, "args": args, "outputs": outputs});
        let mut n = AtenNode::parse(v.as_object().unwrap()).unwrap();
        n.bind(None).unwrap();
        n
    }

    #[test]
    fn sort_scratch_is_the_sorted_axis_indices() {
        let n = node(
            "aten.sort.default",
            serde_json::json!([{"input": 0}, 0]),
            &[8, 3],
            &["float32", "int64"],
        );
        let shape = crate::shape::Shape(vec![
            crate::shape::Dim::fixed(8),
            crate::shape::Dim::fixed(3),
        ]);
        let inputs = [NodeInput {
            shape: &shape,
            bytes: 96,
            requires_grad: false,
        }];
        let call = Call {
            node: &n,
            batch: 1,
            inputs: &inputs,
        };
        assert_eq!(forward_scratch(&call), 8 * 8);
    }

    #[test]
    fn an_entrys_assumption_is_reported() {
        let n = node(
            "aten.nanmedian.dim",
            serde_json::json!([{"input": 0}, 0]),
            &[3],
            &["float32", "int64"],
        );
        let v = approximations(&n);
        assert!(v.iter().any(|t| t.contains("contiguous")), "{v:?}");
    }
}
