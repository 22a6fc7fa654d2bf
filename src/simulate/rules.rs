//! The per-op rule table: for one backend and precision, what each op of `memcal-graph/1`
//! allocates in the forward pass, what autograd saves for backward, and what the op holds
//! transiently in its forward and its backward. Every rule says where it comes from
//! ([`Source`]); `docs/simulator.md` lists the table with the measured comparisons.
//!
//! `cpu-fp32` (torch on CPU, float32, as `memcal-measure` runs it through tch) is checked
//! against CPU runs of single-op fixtures; `cuda-bf16-autocast` (in [`super::cuda`]) is read off
//! torch 2.11's sources, and is the same table where an op's memory does not depend on the
//! device, with every value sized by the dtype autocast gives it ([`Values`]).

use crate::graph::{DType, Graph, Node, Slot};
use crate::shape::Shape;
use serde::Serialize;

/// A backend and precision with a rule table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Backend {
    /// torch on CPU, everything float32 (the harness's `--device cpu --precision fp32`).
    #[serde(rename = "cpu-fp32")]
    CpuFp32,
    /// torch 2.11 on a CUDA device (sm90), float32 weights, bf16 autocast around the forward
    /// pass (the harness's `--device cuda --precision bf16-autocast`); the table is in
    /// [`super::cuda`].
    #[serde(rename = "cuda-bf16-autocast")]
    CudaBf16Autocast,
}

impl Backend {
    /// The backend whose rules simulate a run at `precision`: fp32 runs are CPU runs (how every
    /// fp32 row was measured), bf16-autocast runs are CUDA runs.
    pub fn for_precision(precision: crate::features::Precision) -> Result<Backend, String> {
        match precision {
            crate::features::Precision::Fp32 => Ok(Backend::CpuFp32),
            crate::features::Precision::Bf16Autocast => Ok(Backend::CudaBf16Autocast),
            crate::features::Precision::Bf16 => Err(
                "no rule table for pure bf16 yet (every value, weight, gradient and AdamW state at bf16, no autocast): the six-factor plan decides".to_string(),
            ),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::CpuFp32 => "cpu-fp32",
            Backend::CudaBf16Autocast => "cuda-bf16-autocast",
        }
    }

    /// Bytes per element of an activation whose dtype the rules do not set otherwise (CPU:
    /// float32; CUDA: the bf16 of autocast's lower-precision ops).
    pub fn activation_bytes(self) -> u64 {
        match self {
            Backend::CpuFp32 => 4,
            Backend::CudaBf16Autocast => 2,
        }
    }

    pub fn is_cuda(self) -> bool {
        matches!(self, Backend::CudaBf16Autocast)
    }
}

/// Where a rule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// Checked against `memcal-measure` runs of single-op fixtures (`tests/fixtures/sim/`).
    Measured,
    /// Read off torch's sources (derivatives.yaml, the ATen CPU kernels) and, for compound ops,
    /// the harness's own forward (`measurement/src/builder.rs`); not yet checked by a run.
    TorchSource,
    /// A plausible guess, neither measured nor read off a source.
    Assumed,
    /// Its constants were chosen to match these fixtures' runs (so their agreement is not
    /// evidence for it): `calibrated on <fixtures>`.
    Calibrated(&'static str),
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::TorchSource => "torch source",
            Source::Assumed => "assumed",
            Source::Calibrated(s) => s,
        }
    }
}

/// What the forward pass produces as the node's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// A new buffer of this many bytes.
    New(u64),
    /// A view of input 0 (no new memory; it keeps input 0's buffer alive).
    View,
    /// `reshape`/`flatten`: a view of a contiguous input, a new contiguous copy otherwise.
    ReshapeView,
}

/// One tensor autograd saves for the node's backward.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Saved {
    /// Input `i` as it is (its buffer is kept alive; nothing new).
    Input(usize),
    /// Input `i` if input `j` requires grad (`mul` saves each factor for the other's gradient).
    InputFor(usize, usize),
    /// Input `i`, or a new contiguous copy of it when it is not contiguous (linear after permute).
    InputContiguous(usize),
    /// `matmul`'s operand `i` folded to 3-d, if input `j` requires grad: the input itself when
    /// its batch axes merge into one without a copy (contiguous, or only its last two axes
    /// swapped), else a new contiguous copy (a head view `[B, h, T, hd]` of `[B, T, h, hd]`).
    InputFolded(usize, usize),
    /// The node's own output.
    Out,
    /// A tensor made inside the op and kept for backward (statistics, masks, indices, copies,
    /// workspaces), with its size in bytes.
    Internal { what: &'static str, bytes: u64 },
    /// A tensor made inside the op and kept for backward only if input `j` requires grad
    /// (an in-place op's `original_self` clone under torchgen's `should_compute_output`
    /// guard); nothing is made otherwise, nor outside autograd.
    InternalFor {
        what: &'static str,
        bytes: u64,
        j: usize,
    },
    /// A tensor made inside the op that autograd keeps for backward, but that under no_grad
    /// is freed before the op's last moment (a QLoRA projection's dequantized weight, saved by
    /// `mm` for its input's gradient; a contiguous operand copy `bmm` makes after `matmul`'s
    /// folding; a tensor local to a block of the harness's forward): nothing at the end of a
    /// no_grad forward.
    Kept { what: &'static str, bytes: u64 },
}

/// How the gradient with respect to one input is produced in backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Grad {
    /// A new buffer the size of the input.
    New,
    /// The output's gradient buffer itself, or a view of it (add, views, concat slices): no
    /// new memory, and it keeps that buffer alive.
    OfOutput,
    /// Not differentiable (labels, indices).
    None,
    /// CUDA autocast: the op's gradient is made at the dtype of the op's cast copy of the input
    /// (this many bytes), then the cast's `ToCopyBackward` converts it to the input's dtype (a
    /// new buffer of the input's size) and the op-side one is freed.
    ViaCast(u64),
}

/// When autograd keeps an autocast bf16 copy of a parameter past the end of forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopySaved {
    /// Saved when the op's input requires grad (`mm` saves `mat2` only for `self`'s gradient).
    IfInputRequiresGrad,
    /// Always saved (`convolution`'s backward formula uses the weight for every gradient).
    Always,
}

/// The backward's highest point of a compound op, in bytes over the level before its backward
/// (which holds the incoming gradient and everything the op saved).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BackwardPeak {
    /// When the incoming gradient is freed once the op's last inner node (its output
    /// projection) has used it.
    pub freed: u64,
    /// When the incoming gradient is still held elsewhere (a residual `add` handed the same
    /// buffer to both its inputs), so it stays alive through the op's backward.
    pub held: u64,
    /// The op's parameter tensors (indices into `parameter_tensors()`) whose gradients exist
    /// by then (those used last in forward).
    pub params: Vec<usize>,
}

/// The rule for one node at one batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpRule {
    pub output: Output,
    /// Whether the output is contiguous; `None`: as input 0 (elementwise ops keep its layout).
    pub output_contiguous: Option<bool>,
    /// A non-contiguous output's axis order, where it is a dense permuted view (CPU flash
    /// sdpa's output is `[B, Tq, h, hd]` returned transposed).
    pub output_perm: Option<Perm>,
    /// The output is allocated like input 0 (`empty_like`): contiguous when it is, in its axis
    /// order when that is known and keeps the last axis innermost; `output_contiguous` and
    /// `output_perm` give the layout otherwise.
    pub output_like_input: bool,
    pub saved: Vec<Saved>,
    /// Bytes held only while the forward op runs, on top of its output and saved tensors.
    pub forward_transient: u64,
    /// Under no_grad (a recomputed stage's forward), bytes held at the op's last moment
    /// instead of `forward_transient`; None: the same.
    pub forward_transient_no_grad: Option<u64>,
    /// Bytes held only while the backward op runs, on top of the gradient it receives, the
    /// gradients it produces (inputs and parameters) and what it saved.
    pub backward_transient: u64,
    /// For a compound op, whose inner autograd nodes free their saved tensors one by one: the
    /// backward's highest point in bytes over the level before it (which holds the incoming
    /// gradient and everything the op saved), and the parameter tensors (indices into the op's
    /// `parameter_tensors()`) whose gradients exist by then. The engine then frees what the op
    /// saved and its incoming gradient before it allocates the input's gradient.
    pub backward_peak: Option<BackwardPeak>,
    /// For a compound op whose inner temporaries peak before all its saved tensors exist: the
    /// forward's highest point in bytes over the level before it.
    pub forward_peak: Option<u64>,
    /// One entry per input.
    pub grads: Vec<Grad>,
    /// CUDA autocast: the op's parameters are cast to bf16 through autocast's weight cache
    /// (`cached_cast`: fp32 leaves that require grad); matrices (rank >= 2) are saved as said,
    /// biases only live in the cache until it is cleared at the end of forward.
    pub autocast: Option<CopySaved>,
    /// CUDA autocast: parameter gradients are made in bf16 by the op and converted to the fp32
    /// `.grad` by the cast's `ToCopyBackward` (both exist for a moment).
    pub bf16_param_grads: bool,
    /// The op calls cuBLAS (its thread's workspace is made at the first call).
    pub cublas: bool,
    /// The op reads its input contiguously: a non-contiguous input costs a transient copy.
    pub needs_contiguous_input: bool,
    /// A gradient it hands on as the incoming one (`Grad::OfOutput`) is that gradient
    /// reshaped (a generic node whose formula is `grad.reshape(...)`): a copy when the
    /// incoming gradient is not contiguous, as `reshape` and `flatten` make.
    pub grad_reshapes: bool,
    pub source: Source,
    /// What the rule says, in words (for the docs and `--timeline`).
    pub note: &'static str,
}

impl OpRule {
    pub(crate) fn new(
        output: Output,
        saved: Vec<Saved>,
        grads: Vec<Grad>,
        source: Source,
    ) -> OpRule {
        OpRule {
            output,
            output_contiguous: Some(true),
            output_perm: None,
            output_like_input: false,
            saved,
            forward_transient: 0,
            forward_transient_no_grad: None,
            backward_transient: 0,
            backward_peak: None,
            forward_peak: None,
            grads,
            autocast: None,
            bf16_param_grads: false,
            cublas: false,
            needs_contiguous_input: false,
            grad_reshapes: false,
            source,
            note: "",
        }
    }

    pub(crate) fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }

    pub(crate) fn fwd(mut self, bytes: u64) -> Self {
        self.forward_transient = bytes;
        self
    }

    pub(crate) fn fwd_no_grad(mut self, bytes: u64) -> Self {
        self.forward_transient_no_grad = Some(bytes);
        self
    }

    pub(crate) fn bwd(mut self, bytes: u64) -> Self {
        self.backward_transient = bytes;
        self
    }

    pub(crate) fn keeps_layout(mut self) -> Self {
        self.output_contiguous = None;
        self
    }

    pub(crate) fn contiguous_input(mut self) -> Self {
        self.needs_contiguous_input = true;
        self
    }
}

/// Sizes the rules need, at a batch.
pub(crate) struct Sizes<'a> {
    pub node: &'a Node,
    /// The node's position in the graph.
    pub k: usize,
    pub batch: u64,
    /// Bytes per element of activations the rule makes itself.
    pub e: u64,
    /// Every value's shape and element bytes, by position.
    pub values: &'a Values<'a>,
}

impl Sizes<'_> {
    /// The shape of input `i`.
    pub fn shape_in(&self, i: usize) -> Option<&Shape> {
        self.values
            .args(self.k)
            .get(i)
            .map(|&v| self.values.shape(v as usize))
    }
    /// Elements of input `i`.
    pub fn n_in(&self, i: usize) -> u64 {
        self.shape_in(i).map_or(0, |s| s.numel_at(self.batch))
    }
    /// Bytes per element of input `i`.
    pub fn e_in(&self, i: usize) -> u64 {
        self.values
            .args(self.k)
            .get(i)
            .map_or(self.e, |&v| self.values.elem(v as usize))
    }
    /// Bytes per element of the output.
    pub fn e_out(&self) -> u64 {
        self.values.elem(self.values.node_value(self.k))
    }
    /// Elements of the output.
    pub fn n_out(&self) -> u64 {
        self.node.output.numel_at(self.batch)
    }
    /// Bytes of input `i` as an activation.
    pub fn x(&self, i: usize) -> u64 {
        self.n_in(i) * self.e_in(i)
    }
    /// Bytes of the output as an activation.
    pub fn y(&self) -> u64 {
        self.n_out() * self.e_out()
    }
    /// Size of dimension `d` of input 0.
    pub fn dim(&self, d: usize) -> u64 {
        self.shape_in(0)
            .and_then(|s| s.0.get(d).map(|x| x.at(self.batch)))
            .unwrap_or(1)
    }
    /// Rows of a `[..., width]` input 0.
    pub fn rows(&self, width: u64) -> u64 {
        self.n_in(0) / width.max(1)
    }
}

/// Every value of a graph by position (graph inputs `0..n_inputs`, then node `k` at
/// `n_inputs + k`): its shape and its element bytes under the backend, and each node's inputs
/// as positions. Built once per simulation, so that no step of it looks a name up.
pub struct Values<'g> {
    n_inputs: usize,
    shapes: Vec<&'g Shape>,
    elems: Vec<u64>,
    /// Node `k`'s inputs are `args[starts[k]..starts[k + 1]]`.
    starts: Vec<u32>,
    args: Vec<u32>,
}

impl<'g> Values<'g> {
    /// Resolves every node's inputs; the element size of every value under `backend`: all
    /// float32 on CPU; on CUDA the dtype autocast gives each op's output
    /// ([`output_element`]). An error for an input that is not an earlier value
    /// (the graph was changed after it was checked).
    pub fn new(graph: &'g Graph, backend: Backend) -> Result<Values<'g>, String> {
        let n_inputs = graph.inputs.len();
        let total = n_inputs + graph.nodes.len();
        if total >= u32::MAX as usize {
            return Err("the graph has more than 2^32 values".into());
        }
        let mut shapes = Vec::with_capacity(total);
        let mut elems = Vec::with_capacity(total);
        for i in &graph.inputs {
            shapes.push(&i.shape);
            elems.push(input_element_bytes(i.dtype, backend));
        }
        let mut starts = Vec::with_capacity(graph.nodes.len() + 1);
        let mut args = Vec::with_capacity(graph.nodes.len() + graph.nodes.len() / 2);
        starts.push(0u32);
        let mut input_elems = Vec::new();
        for (k, n) in graph.nodes.iter().enumerate() {
            let first = args.len();
            match graph.input_positions(k) {
                Some(resolved) => args.extend_from_slice(resolved),
                None => {
                    for name in &n.inputs {
                        let v = match graph.slot_of(name) {
                            Some(Slot::Input(i)) => i,
                            Some(Slot::Node(j)) if j < k => n_inputs + j,
                            _ => {
                                return Err(format!(
                                    "node `{}`: input `{name}` is not a graph input or an \
                                     earlier node (the graph was changed after it was checked)",
                                    n.id
                                ))
                            }
                        };
                        args.push(v as u32);
                    }
                }
            }
            starts.push(args.len() as u32);
            shapes.push(&n.output);
            elems.push(match (n.op.family().element_bytes(&n.op), backend) {
                (Some(bytes), _) => bytes,
                (None, Backend::CpuFp32) => 4,
                (None, Backend::CudaBf16Autocast) => {
                    input_elems.clear();
                    input_elems.extend(args[first..].iter().map(|&v| elems[v as usize]));
                    output_element(n, &input_elems)
                }
            });
        }
        Ok(Values {
            n_inputs,
            shapes,
            elems,
            starts,
            args,
        })
    }

    /// Node `k`'s inputs, as value positions.
    pub fn args(&self, k: usize) -> &[u32] {
        &self.args[self.starts[k] as usize..self.starts[k + 1] as usize]
    }
    /// The shape of value `v`.
    pub fn shape(&self, v: usize) -> &'g Shape {
        self.shapes[v]
    }
    /// Bytes per element of value `v`.
    pub fn elem(&self, v: usize) -> u64 {
        self.elems[v]
    }
    /// The position of node `k`'s output.
    pub fn node_value(&self, k: usize) -> usize {
        self.n_inputs + k
    }
    /// The node whose output value `v` is (None: a graph input).
    pub fn as_node(&self, v: usize) -> Option<usize> {
        v.checked_sub(self.n_inputs)
    }
    /// How many values (graph inputs and nodes).
    pub fn len(&self) -> usize {
        self.shapes.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }
}

/// bf16 element bytes.
pub(crate) const BF16: u64 = 2;
/// float32 element bytes.
pub(crate) const F32: u64 = 4;

/// The dtype (element bytes) autocast gives the node's output on CUDA (the
/// `cuda-bf16-autocast` table's, `simulate/cuda.rs`), from its inputs' dtypes (`inputs`: each
/// input's element bytes, in order).
pub fn output_element(node: &Node, inputs: &[u64]) -> u64 {
    let input = |i: usize| inputs.get(i).copied().unwrap_or(F32);
    let promoted = inputs
        .iter()
        .copied()
        .filter(|&e| e <= F32)
        .max()
        .unwrap_or(F32);
    let family = node.op.family();
    if family.runs_in_bf16(&node.op) {
        // lower_precision_fp (AT_FORALL_LOWER_PRECISION_FP; RNNs through `_cudnn_rnn`'s
        // autocast wrapper).
        return BF16;
    }
    family.autocast_output(&node.op, input(0), promoted)
}

/// Bytes of a graph input's element: the harness makes float32 inputs (`randn`, 4 bytes on
/// either device) and int64 labels and indices (8 bytes).
pub fn input_element_bytes(dtype: DType, _backend: Backend) -> u64 {
    match dtype {
        DType::Float32 => 4,
        DType::Int64 => 8,
    }
}

/// The cpu-fp32 table.
pub(crate) fn cpu_rule(graph: &Graph, k: usize, batch: u64, values: &Values) -> OpRule {
    cpu_rule_at(graph, k, batch, values, 4)
}

/// The cpu-fp32 table's structure with values sized by `elems` and the op's own activations at
/// `e` bytes (the CUDA table's base for ops whose memory does not depend on the device).
pub(crate) fn cpu_rule_at(graph: &Graph, k: usize, batch: u64, values: &Values, e: u64) -> OpRule {
    let node = &graph.nodes[k];
    let s = Sizes {
        node,
        k,
        batch,
        e,
        values,
    };
    node.op.family().cpu_rule(&node.op, graph, &s)
}

/// The axis order of a dense view: the value is `c.permute(p)` of a contiguous tensor `c`
/// (rank up to 8). A value is contiguous when its order is the identity; `matmul` folds it to
/// 3-d without a copy when every axis but the last two is in place (`k.transpose(-2, -1)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm {
    len: u8,
    p: [u8; 8],
}

impl Perm {
    /// The order `p` (axis `i` of the view is axis `p[i]` of the contiguous tensor).
    pub fn new(p: &[usize]) -> Option<Perm> {
        if p.len() > 8 {
            return None;
        }
        let mut a = [0u8; 8];
        for (i, &d) in p.iter().enumerate() {
            a[i] = d as u8;
        }
        Some(Perm {
            len: p.len() as u8,
            p: a,
        })
    }

    pub fn identity(rank: usize) -> Option<Perm> {
        Perm::new(&(0..rank).collect::<Vec<_>>())
    }

    /// The order after `permute(dims)`: axis `i` is this view's axis `dims[i]`.
    pub fn then(self, dims: &[i64]) -> Option<Perm> {
        let r = self.len as i64;
        let mut out = Vec::with_capacity(dims.len());
        for &d in dims {
            let a = if d < 0 { d + r } else { d };
            out.push(*self.p.get(usize::try_from(a).ok()?)? as usize);
        }
        (out.len() == self.len as usize)
            .then(|| Perm::new(&out))
            .flatten()
    }

    /// The last axis is the innermost (stride 1) of the dense tensor this view orders.
    pub fn last_innermost(self) -> bool {
        self.len > 0 && self.p[self.len as usize - 1] == self.len - 1
    }

    pub fn is_identity(self) -> bool {
        (0..self.len as usize).all(|i| self.p[i] as usize == i)
    }

    /// Every axis but the last two in place: its batch axes merge without a copy.
    pub fn folds(self) -> bool {
        (0..(self.len as usize).saturating_sub(2)).all(|i| self.p[i] as usize == i)
    }
}

/// Bytes the AdamW step (libtorch's C++ AdamW, which tch runs) holds beyond its states while it
/// updates one parameter of `bytes` bytes: `exp_avg_sq.sqrt()` and its quotient by the bias
/// correction exist together, plus three float32 scalars (calibrated on sim-mlp-ce: chosen to
/// match it, not derived; `docs/simulator.md`).
pub fn adamw_transient(bytes: u64) -> u64 {
    2 * bytes + 12
}

/// The rule of a generic elementwise function (`unary`): what it saves is the op table's
/// ([`crate::ops::UnaryFn::saves`], from derivatives.yaml), and its backward holds every
/// intermediate tensor of its derivatives.yaml formula until the whole formula is done (they
/// are C++ temporaries of one expression, freed at its end), besides the incoming gradient,
/// the saved tensor and the gradient made: `exp: grad * result`, `log: grad / self`,
/// `sigmoid`/`tanh`: one fused backward kernel, `neg: -grad`, `mul.Scalar: grad * c`: none;
/// `sqrt: grad / (2 * result)`, `abs: grad * self.sgn()`, `sin: grad * self.cos()`: one;
/// `cos: grad * -self.sin()`, `pow: grad * (e * self.pow(e - 1))`, `rsqrt: -0.5 * grad *
/// result.pow(3)`, `reciprocal: -grad * (result * result)`: two; `erf: 2/sqrt(pi) *
/// exp(-self.pow(2)) * grad`: four. `add.Scalar` hands the incoming gradient on. Checked on
/// single-op fixtures of every function (`sim-unary-*`), exact in every phase.
pub(crate) fn unary(f: crate::ops::UnaryFn, x: u64, y: u64) -> OpRule {
    use crate::ops::{UnaryFn as U, UnarySaves};
    let temporaries = match f {
        U::Exp | U::Log | U::Sigmoid | U::Tanh | U::Neg | U::MulScalar(_) | U::AddScalar(_) => 0,
        U::Sqrt | U::Abs | U::Sin => 1,
        U::Cos | U::Pow(_) | U::Rsqrt | U::Reciprocal => 2,
        U::Erf => 4,
    };
    let (saved, note) = match f.saves() {
        UnarySaves::Nothing => (vec![], "generic elementwise: saves nothing"),
        UnarySaves::Input => (
            vec![Saved::Input(0)],
            "generic elementwise: saves its input",
        ),
        UnarySaves::Output => (vec![Saved::Out], "generic elementwise: saves its output"),
    };
    let grad = match f {
        U::AddScalar(_) => Grad::OfOutput,
        _ => Grad::New,
    };
    // The temporaries' rule (alive to the end of the expression) was found on these three
    // fixtures, so they are not evidence for it; the other functions were checked with it.
    let source = match f {
        U::Cos | U::Pow(_) | U::Erf => {
            Source::Calibrated("calibrated on sim-unary-cos, sim-unary-pow, sim-unary-erf")
        }
        _ => Source::Measured,
    };
    OpRule::new(Output::New(y), saved, vec![grad], source)
        .keeps_layout()
        .bwd(temporaries * x)
        .note(note)
}

/// What sdpa's rules call its logsumexp and a bool mask's additive copy (the CUDA table
/// resizes both).
pub(crate) const SDPA_LOGSUMEXP: &str = "logsumexp B x H x Tq float32";
pub(crate) const SDPA_BOOL_MASK: &str =
    "the bool mask made additive at q's dtype (convert_boolean_attn_mask)";

/// The threads the harness runs CPU torch with (every CPU row records them: `device.cores`).
pub const HARNESS_CPU_THREADS: u64 = 2;

/// CPU flash sdpa's backward scratch (`cpu_flash_attention_backward`,
/// `ATen/native/cpu/FlashAttentionKernel.cpp`): per thread, float32 `attn` and `grad_attn`
/// blocks of q_split x kv_split and a `dsum` of q_split, where q_split is 256 from 768 query
/// tokens, 64 from 192, else 32, and kv_split 512, each at most its sequence length (`tq`
/// queries, `tk` keys).
pub(crate) fn flash_backward_scratch(tq: u64, tk: u64) -> u64 {
    let (q_split, kv_split) = flash_splits(tq, tk);
    HARNESS_CPU_THREADS * (2 * q_split * kv_split + q_split) * 4
}

/// CPU flash sdpa's block sizes, each at most its sequence length.
fn flash_splits(tq: u64, tk: u64) -> (u64, u64) {
    let q_split = match tq {
        768.. => 256,
        192.. => 64,
        _ => 32,
    };
    (q_split.min(tq), 512.min(tk))
}

/// CPU flash sdpa's forward scratch (`cpu_flash_attention`, the same file): per thread, a
/// float32 buffer of `qk` (q_split x kv_split), `qk_max` and `qk_sum` (q_split each) and `dst`
/// (q_split x v's head size), with the splits of [`flash_backward_scratch`].
pub(crate) fn flash_forward_scratch(tq: u64, tk: u64, head_dim_v: u64) -> u64 {
    let (q_split, kv_split) = flash_splits(tq, tk);
    HARNESS_CPU_THREADS * (q_split * kv_split + 2 * q_split + q_split * head_dim_v) * 4
}

/// torch.nn.MultiheadAttention's own forward (`impl: "torch"`, sdpa), from
/// `F.multi_head_attention_forward` and the saved-tensor hooks of one call, with the stages of
/// the separate-projection rules (flash, or the math path with dropout). Batch-first, each
/// projection reads a `[T, B, E]` view, so its fold saves a contiguous copy of its input (the
/// query's, and the memory's once with packed k and v, twice with a kdim of its own) instead of
/// the input itself; in torch's default `[T, B, E]` layout the inputs are read as they are.
/// Self-attention's q, k and v are views of one packed `[3, T, B, E]` buffer, which flash saves
/// through them and the math path through v; a memory that is key and value has one packed
/// `[2, S, B, E]` k/v buffer. Flash's output is laid out `[T, B, h, hd]`, so out_proj's input
/// is it (no copy); the math path's context is copied. Batch-first, the output is a transposed
/// view of out_proj's `[T, B, E]`.
pub(crate) fn torch_mha_attention(
    s: &Sizes,
    y: u64,
    [d, kdim, heads]: [u64; 3],
    (bias, batch_first): (bool, bool),
    math: bool,
) -> OpRule {
    use Saved::*;
    let e = s.e;
    // torch's default layout (batch_first false) is `[T, B, E]`, read without copies.
    let (b, tq, m_len) = if batch_first {
        (s.dim(0), s.dim(1), 1)
    } else {
        (s.dim(1), s.dim(0), 0)
    };
    let tk = s.shape_in(1).map(|m| m.0[m_len].at(s.batch));
    let keys = tk.unwrap_or(tq);
    let q = b * tq * d * e;
    let m = b * keys * d * e;
    let lse = b * heads * tq * 4;
    let mut saved = vec![if batch_first {
        Internal {
            what: "contiguous copy of the query's [T, B, E] view (q projection's fold)",
            bytes: q,
        }
    } else {
        InputContiguous(0)
    }];
    match tk {
        None => saved.push(Internal {
            what: "packed q, k, v [3, T, B, E]",
            bytes: 3 * q,
        }),
        Some(tk) => {
            let copy = Internal {
                what: "contiguous copy of the memory's [S, B, kdim] view (k/v projection's fold)",
                bytes: b * tk * kdim * e,
            };
            // Read as it is in torch's default layout: saved once, by both projections.
            let copies = if batch_first {
                vec![copy; 1 + usize::from(kdim != d)]
            } else {
                vec![InputContiguous(1)]
            };
            saved.extend(copies);
            if kdim == d {
                saved.push(Internal {
                    what: "packed k, v [2, S, B, E]",
                    bytes: 2 * m,
                });
            } else {
                saved.push(Internal {
                    what: "v projection",
                    bytes: m,
                });
                if !math {
                    saved.push(Internal {
                        what: "k projection",
                        bytes: m,
                    });
                }
            }
            if !math {
                saved.push(Internal {
                    what: "q projection",
                    bytes: q,
                });
            }
        }
    }
    let tt = b * heads * tq * keys * e;
    if math {
        // q and k^T scaled (new), softmax, dropout's mask and output, the context copy.
        saved.extend([
            Internal {
                what: "q scaled",
                bytes: q,
            },
            Internal {
                what: "k scaled and transposed",
                bytes: m,
            },
        ]);
        saved.extend(math_path_tail(tt, q));
    } else {
        saved.extend([
            Internal {
                what: "sdpa output, [T, B, h, hd] laid out (out_proj input)",
                bytes: q,
            },
            Internal {
                what: "logsumexp B x H x T float32",
                bytes: lse,
            },
        ]);
    }
    // Backward: the math path's stages (one B x H x Tq x Tk gradient over the level, as
    // `sdpa_math_attention`); flash's (as `sdpa_attention`, k and v unrepeated) one q-sized
    // tensor higher (found on sim-mha-torch and -kdim, so calibrated on them; first read as the
    // transposed output's gradient copied by out_proj's view, which the [T, B, E] fixtures
    // measured after refuted: they need the same q with a contiguous output). The math path's
    // forward holds one q-sized tensor over what it saves (calibrated on sim-mha-torch-dropout).
    let (freed, held, fwd, source) = if math {
        (
            tt,
            tt + q,
            q,
            Source::Calibrated("calibrated on sim-mha-torch-dropout"),
        )
    } else {
        let (freed, held) = flash_backward_peak(q, [m, m], y, flash_backward_scratch(tq, keys));
        (
            freed + q,
            held + q,
            0,
            Source::Calibrated("calibrated on sim-mha-torch, sim-mha-torch-kdim"),
        )
    };
    let grads = vec![Grad::New; s.node.inputs.len()];
    let mut r = OpRule::new(Output::New(y), saved, grads, source).fwd(fwd);
    r.backward_peak = Some(BackwardPeak {
        freed,
        held,
        params: torch_mha_out_proj(d, kdim, bias),
    });
    // The packed projection's output and its contiguous copy (`unflatten ... .contiguous()`)
    // are alive at once before sdpa runs: the forward's highest point over the level before
    // the op (self: the query's copy, proj 3q and its copy 3q; a memory that is key and value:
    // the query's copy, q, the memory's copy, kv 2m and its copy 2m). With a kdim of its own
    // the three projections make no packed copy. In torch's default layout there is no query
    // or memory copy: 6 q, or q + 4 m.
    let copy_q = if batch_first { q } else { 0 };
    r.forward_peak = match tk {
        None => Some(6 * q + copy_q),
        Some(_) if kdim == d => Some(q + copy_q + m * if batch_first { 5 } else { 4 }),
        Some(_) => None,
    };
    if batch_first {
        r.output_contiguous = Some(false);
        r.output_perm = Perm::new(&[1, 0, 2]);
        r.note = "torch.nn.MultiheadAttention's own forward (impl torch, batch_first, sdpa): projections of [T, B, E] views, each saving a contiguous copy of its input; q, k, v views of a packed buffer; output a transposed view";
    } else {
        r.output_contiguous = Some(true);
        r.note = "torch.nn.MultiheadAttention's own forward (impl torch, its default [T, B, E] layout, sdpa): projections of the inputs as they are; q, k, v views of a packed buffer; a contiguous output";
    }
    r
}

/// The indices of out_proj's weight (and bias) among torch.nn.MultiheadAttention's parameters
/// (`ops/family/attention.rs`: in_proj_weight, or q, k and v weights with a kdim of their own; then
/// in_proj_bias; then out_proj).
pub(crate) fn torch_mha_out_proj(d: u64, kdim: u64, bias: bool) -> Vec<usize> {
    let o = if kdim == d { 1 } else { 3 } + usize::from(bias);
    if bias {
        vec![o, o + 1]
    } else {
        vec![o]
    }
}

/// Flash attention's backward peak over the level before it, (incoming gradient freed, still
/// held): q, k and v's gradients and the output's (`y` bytes, freed when nothing else holds
/// it) with the kernel's per-thread scratch.
pub(crate) fn flash_backward_peak(q: u64, [ks, vs]: [u64; 2], y: u64, scratch: u64) -> (u64, u64) {
    let freed = q.max((2 * q + ks + vs).saturating_sub(y) + scratch);
    let held = q.max(2 * q + ks + vs + scratch);
    (freed, held)
}

/// What sdpa's math path with dropout saves after q and k: the softmax output, dropout's float
/// mask and its output (each `tt` bytes), and the context's copy for out_proj (`q` bytes).
pub(crate) fn math_path_tail(tt: u64, q: u64) -> [Saved; 4] {
    [
        Saved::Internal {
            what: "softmax output B x H x Tq x Tk",
            bytes: tt,
        },
        Saved::Internal {
            what: "dropout mask B x H x Tq x Tk (float)",
            bytes: tt,
        },
        Saved::Internal {
            what: "dropout output B x H x Tq x Tk",
            bytes: tt,
        },
        Saved::Internal {
            what: "context copy (out_proj input)",
            bytes: q,
        },
    ]
}

/// Multi-head attention through sdpa with dropout in training, on CPU: torch's flash
/// kernel takes no dropout (`use_flash_attention_cpp`: `check_for_dropout`), so sdpa runs
/// `_scaled_dot_product_attention_math`: q and k are scaled by sqrt(scale) and, with v,
/// copied contiguous for `bmm` (saved; the projections' outputs are not), the scores are
/// softmaxed (output saved), `dropout` keeps its float mask and its output is saved by the
/// second `bmm`; the context comes out `[B,h,T,hd]`-contiguous, so the out projection's input
/// is a copy. Saved set read with torch's saved-tensor hooks on a single call (3 q-sized
/// copies and 3 `[B,h,T,T]` tensors, no logsumexp); the forward transient and backward peak
/// were settled on `sim-mha-sdpa-dropout*` (tagged calibrated on them).
pub(crate) fn sdpa_math_attention(
    s: &Sizes,
    y: u64,
    d: u64,
    heads: u64,
    bias: bool,
    memory: Option<u64>,
) -> OpRule {
    use Saved::*;
    let e = s.e;
    let (b, tq) = (s.dim(0), s.dim(1));
    // Cross-attention (a memory input of Tk tokens): k and v come from the memory (the same
    // formulas with Tk; derived, not measured).
    let tk = memory.unwrap_or(tq);
    let q = b * tq * d * e;
    let kv = b * tk * d * e;
    let tt = b * heads * tq * tk * e;
    let mut saved = vec![
        InputContiguous(0),
        Internal {
            what: "q scaled, contiguous copy for bmm",
            bytes: q,
        },
        Internal {
            what: "k scaled and transposed, contiguous copy for bmm",
            bytes: kv,
        },
        Internal {
            what: "v, contiguous copy for bmm",
            bytes: kv,
        },
    ];
    saved.extend(math_path_tail(tt, q));
    let mut grads = vec![Grad::New];
    if memory.is_some() {
        saved.push(InputContiguous(1));
        grads.push(Grad::New);
    }
    // Forward: the q, k and v projections (not saved: the math path copies them) and sdpa's
    // output are the harness's locals until the op returns, beside everything saved and the
    // output (the causal mask, a float Tq x Tk, is gone by then).
    let fwd = 2 * q + 2 * kv;
    // Backward: the highest point is one B x H x Tq x Tk tensor over the level (the incoming
    // gradient, when a residual holds it, on top): attn @ v's, dropout's and softmax's
    // backwards each make one such gradient while the one before is freed. Derived first as
    // one v-sized tensor more (a contiguous copy of the gradient for bmm); the fixtures
    // showed that copy is not there at the peak, so this is calibrated on them.
    let freed = tt;
    let held = tt + q;
    let o_proj = if bias { vec![6, 7] } else { vec![3] };
    let mut r = OpRule::new(
        Output::New(y),
        saved,
        grads,
        Source::Calibrated("calibrated on sim-mha-sdpa-dropout, sim-mha-sdpa-dropout-causal, sim-mha-sdpa-dropout-long"),
    )
        .fwd(fwd)
        .note("sdpa attention with dropout (backend \"sdpa\", dropout > 0) on CPU: the math path (no flash kernel for dropout): saves q, k, v contiguous copies, the softmax output, dropout's float mask and output (three B x H x T x T tensors) and a context copy; no logsumexp");
    r.backward_peak = Some(BackwardPeak {
        freed,
        held,
        params: o_proj,
    });
    r
}

/// Attention through CPU flash sdpa (grouped-query attention, and multi-head self- or
/// cross-attention with backend "sdpa"): `[embed_dim, heads, kv_heads, head_dim]`. The q, k
/// and v projections (k and v of the memory, input 1, for cross-attention), k and v repeated to
/// every head when there are fewer kv heads, one sdpa call saving q, k, v, its output and a
/// B x H x Tq float32 logsumexp; backward: out_proj (+ the context's gradient), then sdpa's
/// backward (+ q, k, v gradients while the context's gradient is alive, less the incoming
/// gradient). Checked on `sim-gqa`, `sim-mha-sdpa*` and `sim-mha-sdpa-cross`. `qk_norm`:
/// q and k each go through the composite RMS norm first (the `rms_norm` rule's saved set, per
/// head: the projection, x*rstd and a float32 rstd per row of head_dim; forward holds x^2).
pub(crate) fn sdpa_attention(
    s: &Sizes,
    y: u64,
    [embed_dim, num_heads, num_kv_heads, head_dim]: [u64; 4],
    (bias, out_bias): (bool, bool),
    (repeat_kv, qk_norm): (bool, bool),
    note: &'static str,
) -> OpRule {
    use Saved::*;
    let e = s.e;
    let t = s.rows(embed_dim);
    // Cross-attention: k and v have the memory's length.
    let cross = s.shape_in(1).is_some();
    let tk = s.shape_in(1).map_or(s.dim(1), |m| m.0[1].at(s.batch));
    let q = t * num_heads * head_dim * e;
    let kv = s.dim(0) * tk * num_kv_heads * head_dim * e;
    // Without `repeat_kv`, sdpa's `enable_gqa` reads the unrepeated k and v.
    let repeated = num_heads > num_kv_heads && repeat_kv;
    let (ks, vs) = if repeated { (q, q) } else { (kv, kv) };
    let lse = s.dim(0) * num_heads * s.dim(1) * 4;
    let mut saved = vec![
        InputContiguous(0),
        Internal {
            what: "q projection",
            bytes: q,
        },
        Internal {
            what: "k (repeated to all heads)",
            bytes: ks,
        },
        Internal {
            what: "v (repeated to all heads)",
            bytes: vs,
        },
        Internal {
            what: "sdpa output (out_proj input)",
            bytes: q,
        },
        Internal {
            what: "logsumexp B x H x T float32",
            bytes: lse,
        },
    ];
    if cross {
        saved.push(InputContiguous(1));
    }
    let mut fwd = if repeated { 2 * kv } else { 0 };
    if qk_norm {
        let rows_q = t * num_heads * 4;
        let rows_k = s.dim(0) * tk * num_kv_heads * 4;
        saved.extend([
            Internal {
                what: "q projection (q_norm's input)",
                bytes: q,
            },
            Internal {
                what: "q*rstd (q_norm)",
                bytes: q,
            },
            Internal {
                what: "q_norm's rstd, float32 per head",
                bytes: rows_q,
            },
            Internal {
                what: "k projection (k_norm's input)",
                bytes: kv,
            },
            Internal {
                what: "k*rstd (k_norm)",
                bytes: kv,
            },
            Internal {
                what: "k_norm's rstd, float32 per head",
                bytes: rows_k,
            },
        ]);
        fwd = fwd.max(q + 2 * rows_q);
    }
    // sdpa's backward holds its per-thread scratch while q, k and v's gradients are made.
    let scratch = flash_backward_scratch(s.dim(1), tk);
    let (freed, held) = flash_backward_peak(q, [ks, vs], y, scratch);
    // out_proj's weight (and bias) among the parameters: q, k, v weights, each with its bias.
    let o = if bias { 6 } else { 3 };
    let o_proj = if out_bias { vec![o, o + 1] } else { vec![o] };
    let grads = vec![Grad::New; if cross { 2 } else { 1 }];
    let mut r = OpRule::new(Output::New(y), saved, grads, Source::Measured)
        .fwd(fwd)
        .note(note);
    r.backward_peak = Some(BackwardPeak {
        freed,
        held,
        params: o_proj,
    });
    r
}
