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
use crate::ops::{Activation, Op};
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
    pub(super) fn new(
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

    pub(super) fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }

    pub(super) fn fwd(mut self, bytes: u64) -> Self {
        self.forward_transient = bytes;
        self
    }

    pub(super) fn fwd_no_grad(mut self, bytes: u64) -> Self {
        self.forward_transient_no_grad = Some(bytes);
        self
    }

    pub(super) fn bwd(mut self, bytes: u64) -> Self {
        self.backward_transient = bytes;
        self
    }

    pub(super) fn keeps_layout(mut self) -> Self {
        self.output_contiguous = None;
        self
    }

    pub(super) fn contiguous_input(mut self) -> Self {
        self.needs_contiguous_input = true;
        self
    }
}

/// Sizes the rules need, at a batch.
pub(super) struct Sizes<'a> {
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
    /// ([`super::cuda::output_element`]). An error for an input that is not an earlier value
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
            elems.push(match (&n.op, backend) {
                (Op::Constant { dtype, .. }, _) => dtype.bytes(),
                (Op::Aten(a), _) => a.outputs[a.item].dtype.bytes(),
                (_, Backend::CpuFp32) => 4,
                (_, Backend::CudaBf16Autocast) => {
                    input_elems.clear();
                    input_elems.extend(args[first..].iter().map(|&v| elems[v as usize]));
                    super::cuda::output_element(n, &input_elems)
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

/// Bytes of a graph input's element: the harness makes float32 inputs (`randn`, 4 bytes on
/// either device) and int64 labels and indices (8 bytes).
pub fn input_element_bytes(dtype: DType, _backend: Backend) -> u64 {
    match dtype {
        DType::Float32 => 4,
        DType::Int64 => 8,
    }
}

/// The rule for `node` at `batch` on `backend`, with the element size of every value.
pub fn rule(graph: &Graph, k: usize, batch: u64, backend: Backend, values: &Values) -> OpRule {
    if backend.is_cuda() {
        return super::cuda::rule(graph, k, batch, values);
    }
    cpu_rule(graph, k, batch, values)
}

/// The cpu-fp32 table.
pub(super) fn cpu_rule(graph: &Graph, k: usize, batch: u64, values: &Values) -> OpRule {
    cpu_rule_at(graph, k, batch, values, 4)
}

/// The cpu-fp32 table's structure with values sized by `elems` and the op's own activations at
/// `e` bytes (the CUDA table's base for ops whose memory does not depend on the device).
pub(super) fn cpu_rule_at(graph: &Graph, k: usize, batch: u64, values: &Values, e: u64) -> OpRule {
    let node = &graph.nodes[k];
    let s = Sizes {
        node,
        k,
        batch,
        e,
        values,
    };
    let e = s.e;
    let y = s.y();
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &node.op {
        Op::Linear { .. } => OpRule::new(Output::New(y), vec![InputContiguous(0)], one, Measured)
            .note("saves its input (a contiguous copy when the input is not contiguous); backward: grad input, weight and bias grads"),
        Op::Embedding { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::None], Measured)
            .note("saves the (int64) indices, which are a graph input; backward builds a full table-size gradient"),
        Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => conv_rule(graph, &s),
        Op::BatchNorm { .. } | Op::LayerNorm { .. } | Op::RmsNorm { .. } | Op::GroupNorm { .. } => norm_rule(&s),
        Op::Activation(_) | Op::Unary(_) | Op::Dropout { .. } | Op::Add | Op::Mul | Op::Sub | Op::Div => elementwise_rule(&s),
        Op::Concat { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput; node.inputs.len()], Measured)
            .note("a new buffer; saves nothing; backward hands out slices (views) of its gradient"),
        Op::Upsample { .. } | Op::MaxPool(_) | Op::AvgPool(_) | Op::AdaptiveAvgPool { .. } => pool_rule(&s),
        Op::Flatten { .. } | Op::Reshape { .. } | Op::Permute { .. } | Op::SelectToken { .. } | Op::Slice { .. } | Op::Expand { .. } | Op::Parameter { .. } => view_rule(&s),
        Op::Mean { .. } => OpRule::new(Output::New(y), vec![], one, Measured)
            .note("saves nothing (mean_backward needs only sizes); backward expands the gradient and divides it: one new input-sized buffer"),
        Op::Softmax { .. } => OpRule::new(Output::New(y), vec![Out], one, Measured)
            .contiguous_input()
            .note("saves its output"),
        Op::CrossEntropy | Op::Mse => loss_rule(&s),
        Op::MultiheadAttention { .. } | Op::GqaAttention { .. } | Op::MlaAttention { .. } | Op::Sdpa { .. } => attention_rule(&s),
        Op::Moe { .. } => moe_rule(&s),
        Op::Lstm(_) | Op::Gru(_) => rnn_rule(&s),
        Op::LearnedPosition { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput], Assumed)
            .keeps_layout()
            .bwd(s.dim(1) * s.dim(2) * e)
            .note("x + table[0..T]: saves nothing; the table's gradient is a batch sum (T x d) scattered into a table-size buffer"),
        Op::PrependToken { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput], Assumed)
            .note("cat(class token expanded, x): saves nothing; x's gradient is a slice of the output's"),
        Op::Matmul => OpRule::new(Output::New(y), vec![InputFolded(0, 1), InputFolded(1, 0)], vec![Grad::New, Grad::New], TorchSource)
            .note("torch.matmul of batched operands (LinearAlgebra.cpp `_matmul_impl`): each is expanded and reshaped to 3-d, a copy where its batch axes do not merge (a transposed head view), and bmm saves each for the other's gradient (derivatives.yaml `bmm`); backward makes both gradients new"),
        Op::Constant { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::None], TorchSource)
            .note("made from constants outside autograd: saves nothing, takes no gradient; freed after its last reader (or kept by one that saves it, a product's other factor)"),
        Op::Aten(a) => super::generic::rule(a, &s),
    }
}

/// Convolutions (oneDNN on CPU): saved input, reorders, padding of narrow heads.
fn conv_rule(graph: &Graph, s: &Sizes) -> OpRule {
    let node = s.node;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let w: u64 = node
        .op
        .parameter_tensors()
        .first()
        .map_or(0, |t| t.iter().product::<u64>() * 4);
    // A conv with fewer than 8 output channels (a segmentation head) has its output
    // padded to 16 channels by oneDNN: (16 / C - 1) more outputs in forward, 16 / C in
    // backward (measured with C = 2), and its input's channels to a multiple of 16.
    let out_c = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) => c.out_channels,
        Op::ConvTranspose2d(c) => c.out_channels,
        _ => 16,
    };
    let in_c = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) => c.in_channels,
        Op::ConvTranspose2d(c) => c.in_channels,
        _ => 16,
    };
    let (pad_fwd, pad_bwd) = if out_c < 8 {
        // Its input is reordered with channels padded to a multiple of 16 too
        // (measured: 64 and 24 input channels).
        let pad_in = x * in_c.div_ceil(16) * 16 / in_c - x;
        (y * 16 / out_c - y + pad_in, y * 16 / out_c + pad_in)
    } else {
        (0, 0)
    };
    let bwd = (x + y).max(w)
        + pad_bwd
        // conv1d runs as a 2-d conv on an unsqueezed weight: one more weight-sized
        // buffer in backward (measured on stride-1 conv1d).
        + if matches!(node.op, Op::Conv1d(_)) { w } else { 0 };
    // Strided dense convs (depthwise ones measured exact without this).
    let stride = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) if c.groups == 1 => c.stride,
        _ => 1,
    };
    // The input's gradient is computed unless the input is data.
    let input_grad = graph.inputs.iter().all(|i| i.name != node.inputs[0]);
    let mut r = OpRule::new(
        Output::New(y),
        vec![Input(0)],
        one,
        Calibrated("calibrated on sim-seg-head, sim-conv1d-s1, sim-conv1d-s2, sim-conv2d-s2"),
    )
        .contiguous_input()
        .fwd(x + w + pad_fwd)
        .bwd(bwd)
        .note("saves its input; oneDNN holds input- and weight-sized reorders in forward, and the larger of input+output and the weight in backward; a strided conv's input gradient holds three input-sized buffers before the weight gradient exists (10-30 KB of fixed scratch on small convs not counted)");
    if stride > 1 && input_grad {
        // Measured on stride-2 conv1d and conv2d: the input-gradient stage (the
        // gradient and two input-sized buffers) or the weight stage, whichever is higher.
        let peak = (3 * x).max(x + w + bwd);
        r.backward_peak = Some(BackwardPeak {
            freed: peak,
            held: peak,
            params: vec![],
        });
    }
    r
}

/// Normalisations: batch, layer, rms and group norms.
fn norm_rule(s: &Sizes) -> OpRule {
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::BatchNorm { num_features } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "save_mean+save_invstd",
                    bytes: 2 * num_features * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and inverse std (2C float32)"),
        Op::LayerNorm {
            normalized_shape, ..
        } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "mean+rstd",
                    bytes: 2 * s.rows(*normalized_shape) * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and rstd (2 x rows float32)"),
        Op::RmsNorm { dim } => {
            let rows = s.rows(*dim) * 4;
            OpRule::new(
                Output::New(y),
                vec![Input(0), Internal { what: "x*rstd", bytes: x }, Internal { what: "rstd", bytes: rows }],
                one,
                TorchSource,
            )
            .fwd(x + 2 * rows)
            .bwd((2 * x).saturating_sub(rows))
            .note("composite (pow, mean, rsqrt, mul, mul): saves its input, x*rstd (a full activation) and rstd; forward holds x^2")
        }
        Op::GroupNorm { num_groups, .. } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "mean+rstd",
                    bytes: 2 * s.dim(0) * num_groups * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and rstd (2 x B x groups float32)"),
        _ => unreachable!("norm_rule: not a normalisation"),
    }
}

/// Elementwise ops: activations, unary functions, dropout and binary arithmetic.
fn elementwise_rule(s: &Sizes) -> OpRule {
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::Activation(Activation::Relu) => {
            OpRule::new(Output::New(y), vec![Out], one, Measured).keeps_layout().note("saves its output")
        }
        Op::Activation(Activation::Tanh) => {
            OpRule::new(Output::New(y), vec![Out], one, Measured).keeps_layout().note("saves its output")
        }
        Op::Activation(Activation::Gelu) | Op::Activation(Activation::Silu) => {
            OpRule::new(Output::New(y), vec![Input(0)], one, Measured).keeps_layout().note("saves its input")
        }
        Op::Activation(Activation::GeluTanh) => OpRule::new(Output::New(y), vec![Input(0)], one, Measured)
            .keeps_layout()
            .note("gelu(approximate=\"tanh\"): one fused kernel each way, saves its input (derivatives.yaml `gelu_backward(grad, self, approximate)`)"),
        Op::Unary(f) => unary(*f, x, y),
        Op::Dropout { p } if *p == 0.0 => OpRule::new(Output::View, vec![], vec![Grad::OfOutput], TorchSource)
            .keeps_layout()
            .note("p = 0 returns its input: no new tensor"),
        Op::Dropout { .. } => OpRule::new(
            Output::New(y),
            vec![Internal { what: "noise (float32, input size)", bytes: x }],
            one,
            Measured,
        )
        .keeps_layout()
        .note("CPU has no fused dropout: saves a float32 noise tensor of the input's size (input * noise)"),
        Op::Add => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput, Grad::OfOutput], Measured)
            .keeps_layout()
            .note("saves nothing; backward passes its gradient to both inputs without a copy"),
        Op::Mul => OpRule::new(Output::New(y), vec![InputFor(0, 1), InputFor(1, 0)], vec![Grad::New, Grad::New], Measured)
            .keeps_layout()
            .note("saves each factor for the other's gradient"),
        Op::Sub => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput, Grad::New], Measured)
            .keeps_layout()
            .note("saves nothing (derivatives.yaml `sub.Tensor`: self `grad`, other `-grad`): the first input's gradient is the incoming one, the second's a new negated copy"),
        Op::Div => OpRule::new(Output::New(y), vec![InputFor(0, 1), Input(1)], vec![Grad::New, Grad::New], Measured)
            .keeps_layout()
            .bwd(2 * x)
            .note("saves both (derivatives.yaml `div.Tensor`: self `grad / other`, other `-grad * ((self / other) / other)`); backward holds two input-sized temporaries beside the gradients"),
        _ => unreachable!("elementwise_rule: not an elementwise op"),
    }
}

/// Resampling and pooling: upsample, max, average and adaptive average pools.
fn pool_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::Upsample { .. } => {
            OpRule::new(Output::New(y), vec![], one, Measured).note("nearest: saves nothing")
        }
        Op::MaxPool(_) => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "indices (int64)",
                    bytes: node.output.numel_at(batch) * 8,
                },
            ],
            one,
            Measured,
        )
        .note("saves its input plus int64 indices of the output's size"),
        Op::AvgPool(_) => {
            OpRule::new(Output::New(y), vec![Input(0)], one, Measured).note("saves its input")
        }
        Op::AdaptiveAvgPool { output_size: 1 } => OpRule::new(
            Output::New(y),
            vec![],
            one,
            Measured,
        )
        .fwd(x.saturating_sub(y))
        .note("output 1 runs as mean(): saves nothing; forward holds an input-sized temporary"),
        Op::AdaptiveAvgPool { .. } => {
            OpRule::new(Output::New(y), vec![Input(0)], one, TorchSource).note("saves its input")
        }
        _ => unreachable!("pool_rule: not a pool"),
    }
}

/// Views and view-like ops: reshape, permute, token selection, slice, expand, and a
/// parameter expanded over the batch.
fn view_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let one = vec![Grad::New];
    use Source::*;
    match &s.node.op {
        Op::Flatten { .. } | Op::Reshape { .. } => {
            OpRule::new(Output::ReshapeView, vec![], vec![Grad::OfOutput], Measured)
                .note("a view (a copy if the input is not contiguous); backward reshapes the gradient")
        }
        Op::Permute { .. } => {
            let mut r = OpRule::new(Output::View, vec![], vec![Grad::OfOutput], Measured)
                .note("a non-contiguous view; backward permutes the gradient back (a view)");
            r.output_contiguous = Some(is_identity(node));
            r
        }
        Op::SelectToken { .. } => OpRule::new(Output::View, vec![], one, Measured)
            .note("a strided view (keeps the whole input alive); backward scatters into a zero tensor of the input's size"),
        Op::Slice { dim, .. } => {
            let r = s.shape_in(0).map_or(1, |x| x.rank()) as i64;
            let first_axis = (if *dim < 0 { dim + r } else { *dim }) == 0;
            let mut rule = OpRule::new(Output::View, vec![], one, TorchSource)
                .note("a strided view; saves nothing; backward (derivatives.yaml `slice_backward`) makes a zero tensor of the input's size and copies the gradient in");
            rule.output_contiguous = if first_axis { None } else { Some(false) };
            rule
        }
        Op::Expand { .. } => {
            let mut rule = OpRule::new(Output::View, vec![], one, TorchSource)
                .note("a stride-0 view (no new memory, not contiguous: a reshape after it copies); backward sums the gradient back to the input's size (derivatives.yaml `expand`: `at::sum_to(grad, self.sym_sizes())`), a new buffer");
            rule.output_contiguous = Some(false);
            rule
        }
        Op::Parameter { .. } => {
            let mut rule = OpRule::new(Output::New(0), vec![], vec![Grad::None], Assumed)
                .note("the parameter expanded over the batch: a stride-0 view (no new memory, not contiguous: a reader that needs a contiguous input copies it); its gradient is the incoming one summed over the batch, a parameter-sized buffer; the input gets none");
            rule.output_contiguous = Some(false);
            rule
        }
        _ => unreachable!("view_rule: not a view"),
    }
}

/// Losses: cross-entropy and mean squared error.
fn loss_rule(s: &Sizes) -> OpRule {
    let x = s.x(0);
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::CrossEntropy => {
            let logits = x;
            OpRule::new(
                Output::New(4),
                vec![Internal { what: "log_softmax output", bytes: logits }, Internal { what: "total_weight", bytes: 4 }],
                vec![Grad::New, Grad::None],
                Measured,
            )
            .bwd(logits)
            .contiguous_input()
            .note("log_softmax + nll_loss: saves the N x V log-softmax output; backward holds it, nll_loss's N x V gradient and log_softmax's N x V gradient at once (3 N V)")
        }
        Op::Mse => OpRule::new(
            Output::New(x),
            vec![Input(0), Input(1)],
            vec![Grad::New, Grad::New],
            Calibrated("calibrated on sim-mse-only, sim-mse-wide"),
        )
        .fwd(x + 12)
        .note("saves prediction and target; the loss keeps an input-sized buffer alive until it is dropped; forward holds one more input-sized temporary"),
        _ => unreachable!("loss_rule: not a loss"),
    }
}

/// Attention: multi-head (torch's own, sdpa and eager), grouped-query, multi-head latent and
/// bare sdpa.
fn attention_rule(s: &Sizes) -> OpRule {
    let batch = s.batch;
    let y = s.y();
    match &s.node.op {
        Op::MultiheadAttention { embed_dim: d, num_heads, bias, dropout, kdim, torch_impl: true, batch_first, .. } => {
            torch_mha_attention(s, y, [*d, *kdim, *num_heads], (*bias, *batch_first), *dropout > 0.0)
        }
        Op::MultiheadAttention { embed_dim: d, num_heads, bias, sdpa: true, dropout, .. } if *dropout > 0.0 => {
            let tk = s.shape_in(1).map(|m| m.0[1].at(batch));
            sdpa_math_attention(s, y, *d, *num_heads, *bias, tk)
        }
        Op::MultiheadAttention { embed_dim: d, num_heads, bias, sdpa: true, .. } => sdpa_attention(
            s,
            y,
            [*d, *num_heads, *num_heads, d / num_heads],
            (*bias, *bias),
            (true, false),
            "sdpa attention (backend \"sdpa\"): q, k, v projections (k and v of the memory for cross-attention), CPU flash sdpa: saves q, k, v, the output and B x H x Tq logsumexp, no B x H x Tq x Tk tensor; backward peaks in sdpa's backward with its per-thread scratch",
        ),
        Op::MultiheadAttention { sdpa: false, .. } => eager_attention_rule(s),
        Op::GqaAttention { embed_dim, num_heads, num_kv_heads, head_dim, bias, out_bias, repeat_kv, qk_norm, .. } => sdpa_attention(
            s,
            y,
            [*embed_dim, *num_heads, *num_kv_heads, *head_dim],
            (*bias, *out_bias),
            (*repeat_kv, *qk_norm),
            "q, k, v projections, k/v repeated to all heads, CPU flash sdpa: saves q, k, v, the output and B x H x T logsumexp; backward peaks in sdpa's backward with its per-thread scratch",
        ),
        Op::MlaAttention { .. } => mla_rule(s),
        Op::Sdpa { .. } => sdpa_rule(s),
        _ => unreachable!("attention_rule: not an attention op"),
    }
}

/// Multi-head attention run eagerly as the harness writes it (no sdpa).
fn eager_attention_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let e = s.e;
    use Saved::*;
    use Source::*;
    let Op::MultiheadAttention {
        embed_dim: d,
        num_heads,
        causal,
        relative_attention_buckets,
        bias,
        sdpa: false,
        dropout,
        ..
    } = &s.node.op
    else {
        unreachable!("eager_attention_rule: not eager attention")
    };
    let b = s.dim(0);
    let tq = s.dim(1);
    let tk = s.shape_in(1).map_or(tq, |m| m.0[1].at(batch));
    let aq = b * tq * d * e;
    let ak = b * tk * d * e;
    let sc = b * num_heads * tq * tk * e;
    let mut saved = vec![
        InputContiguous(0),
        Kept {
            what: "q (scaled, contiguous copy for bmm)",
            bytes: aq,
        },
        Kept {
            what: "k (contiguous copy for bmm)",
            bytes: ak,
        },
        Kept {
            what: "v (contiguous copy for bmm)",
            bytes: ak,
        },
        Internal {
            what: "attention weights B x H x Tq x Tk",
            bytes: sc,
        },
        Internal {
            what: "context (contiguous, out_proj input)",
            bytes: aq,
        },
    ];
    if node.inputs.len() > 1 {
        saved.push(InputContiguous(1));
    }
    if *causal {
        // A local of the harness's `if causal` block (gone by the end under no_grad).
        saved.push(Kept {
            what: "causal mask (bool Tq x Tk)",
            bytes: tq * tk,
        });
    }
    if *dropout > 0.0 {
        // Dropout on the probabilities: its float mask, and its output (what attn @ v
        // saves) beside the softmax output (what softmax's backward saves).
        saved.push(Internal {
            what: "dropout mask B x H x Tq x Tk (float)",
            bytes: sc,
        });
        saved.push(Internal {
            what: "dropped attention weights B x H x Tq x Tk",
            bytes: sc,
        });
    }
    let mut fwd = 2 * aq + 2 * ak + sc;
    // The bias and its bucket indices are locals of the harness's `if let` block: under
    // no_grad they are gone by the op's end.
    let fwd_no_grad = fwd;
    if *relative_attention_buckets > 0 {
        saved.push(Kept {
            what: "bucket indices (int64 Tq x Tk)",
            bytes: tq * tk * 8,
        });
        fwd += num_heads * tq * tk * e;
    }
    let grads = vec![Grad::New; node.inputs.len()];
    // Backward, stage by stage (derived from the harness's forward and torch's
    // backward formulas, checked against runs): out_proj (+ its input's gradient),
    // attn @ v (+ a copy of the gradient, the weights' and v's gradients, less the
    // context and incoming gradient already freed), softmax (+ the scores' gradient).
    let freed = aq
        .max((sc + ak).saturating_sub(aq))
        .max((2 * sc).saturating_sub(2 * aq));
    let held = aq.max(sc + ak).max((2 * sc).saturating_sub(aq));
    let o_proj = if *bias { vec![6, 7] } else { vec![3] };
    let mut r = OpRule::new(Output::New(aq), saved, grads, Measured)
        .fwd(fwd)
        .fwd_no_grad(fwd_no_grad)
        .note("eager attention as the harness runs it: saves input, q, k, v copies, B x H x Tq x Tk weights and the context; forward also holds q*scale, k, v projections, raw scores and the attention output until it returns; backward peaks at attn @ v or softmax");
    r.backward_peak = Some(BackwardPeak {
        freed,
        held,
        params: o_proj,
    });
    r
}

/// Multi-head latent attention (low-rank q and kv projections).
fn mla_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let e = s.e;
    let y = s.y();
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let Op::MlaAttention {
        embed_dim,
        num_heads: h,
        q_lora_rank: qr,
        kv_lora_rank: kvr,
        qk_nope_head_dim: nope,
        qk_rope_head_dim: rope,
        v_head_dim: v,
        causal,
    } = &s.node.op
    else {
        unreachable!("mla_rule: not MLA")
    };
    // Per token, in elements; `rows` is one element (an rms rstd).
    let t = s.rows(*embed_dim);
    let d = *embed_dim;
    let hq = h * (nope + rope);
    let hv = h * v;
    let hkv = h * (nope + v);
    let q_path = if *qr > 0 { 3 * qr + 1 } else { 0 };
    let kv_path = (kvr + rope) + 2 * kvr + 1;
    // Level once q, k and v exist: the saved normalisations, q (qp), kv_b's output
    // and k (the cat), all locals of the harness's forward until it returns.
    let l0 = q_path + hq + kv_path + hkv + hq;
    let bytes = |elements: u64| elements * t * e;
    let o_proj = vec![node.op.parameter_tensors().len() - 1];
    let mut saved = vec![
        InputContiguous(0),
        Internal {
            what: "q_a output, its rms normalisation, rstd and rms output",
            bytes: bytes(q_path),
        },
        Internal {
            what: "kv_a output (its split is normalised), rms normalisation, rstd and output",
            bytes: bytes(kv_path),
        },
    ];
    let mut r = if hq != hv {
        // CPU flash attention needs equal q/k and v head sizes: this runs sdpa's math
        // path, which saves scaled q and k copies, the B x H x T x T probabilities and
        // a v copy; the context is then copied for o_proj.
        let sc = h * s.dim(1);
        saved.extend([
            Internal {
                what: "scaled q and k (contiguous copies for bmm)",
                bytes: bytes(2 * hq),
            },
            Internal {
                what: "attention probabilities B x H x T x T",
                bytes: bytes(sc),
            },
            Internal {
                what: "v copy and context copy (o_proj input)",
                bytes: bytes(2 * hv),
            },
        ]);
        let mask = if *causal { s.dim(1) * s.dim(1) * 4 } else { 0 };
        let fwd = (l0 + 4 * hq + sc)
            .max(l0 + 3 * hq + 2 * sc + sc / 4)
            .max(l0 + 2 * hq + sc + 3 * hv + d);
        let freed = hv
            .max((sc + hv).saturating_sub(d))
            .max((2 * sc).saturating_sub(hv + d))
            .max((2 * hq).saturating_sub(hv + d));
        let held = hv
            .max(sc + hv)
            .max((2 * sc).saturating_sub(hv))
            .max((2 * hq).saturating_sub(hv));
        let mut r = OpRule::new(Output::New(y), saved, one, Measured).note(
            "q and kv low-rank projections with rms norms; q/k and v head sizes differ, so sdpa runs its math path (saves q and k copies, the B x H x T x T probabilities, a v copy); backward peaks in softmax's backward",
        );
        r.forward_peak = Some(bytes(fwd) + mask);
        r.backward_peak = Some(BackwardPeak {
            freed: bytes(freed),
            held: bytes(held),
            params: o_proj,
        });
        r
    } else {
        saved.extend([
            Internal {
                what: "q, kv_b output (v is a view of it), k",
                bytes: bytes(2 * hq + hkv),
            },
            Internal {
                what: "sdpa output (o_proj input) and logsumexp",
                bytes: bytes(hv + h),
            },
        ]);
        let mut r = OpRule::new(Output::New(y), saved, one, TorchSource).note(
            "q and kv low-rank projections with rms norms, CPU flash sdpa: saves every projection output, the normalisations, k, the output and logsumexp",
        );
        r.forward_peak = Some(bytes(l0 + hv + h + d));
        r.backward_peak = Some(BackwardPeak {
            freed: bytes((2 * hv + 2 * hq).saturating_sub(d).max(hv)),
            held: bytes(2 * hv + 2 * hq),
            params: o_proj,
        });
        r
    };
    r.forward_transient = 0;
    r
}

/// Bare scaled dot-product attention (CPU flash kernel).
fn sdpa_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let e = s.e;
    let y = s.y();
    use Saved::*;
    use Source::*;
    let Op::Sdpa { .. } = &s.node.op else {
        unreachable!("sdpa_rule: not sdpa")
    };
    let (b, h, tq) = (s.dim(0), s.dim(1), s.dim(2));
    let tk = s.shape_in(1).map_or(tq, |k| k.0[2].at(batch));
    let mut saved = vec![
        Input(0),
        Input(1),
        Input(2),
        Out,
        Internal {
            what: SDPA_LOGSUMEXP,
            bytes: b * h * tq * 4,
        },
    ];
    let mut grads = vec![Grad::New; 3];
    if node.inputs.len() > 3 {
        // The mask: sdpa turns a bool one into an additive one of q's dtype
        // (attention.cpp `convert_boolean_attn_mask`, a new tensor per call); the flash
        // kernel's backward takes it (derivatives.yaml), so it is saved.
        saved.push(if s.e_in(3) == 1 {
            Internal {
                what: SDPA_BOOL_MASK,
                bytes: s.n_in(3) * e,
            }
        } else {
            Input(3)
        });
        grads.push(Grad::None);
    }
    let mut rule = OpRule::new(Output::New(y), saved, grads, TorchSource)
    .bwd(flash_backward_scratch(tq, tk))
    .note("CPU flash sdpa (FlashAttentionKernel.cpp): the output is made like q (`empty_like`, _meta_registrations.py: contiguous for a contiguous q, [B, Tq, h, hd] returned transposed for q a transposed head view); saves q, k, v, the output and a B x H x Tq logsumexp, never the scores; backward makes q, k and v's gradients contiguous (not in a transposed view's layout) and holds its per-thread scratch");
    rule.output_contiguous = Some(false);
    rule.output_perm = Perm::new(&[0, 2, 1, 3]);
    rule.output_like_input = true;
    rule
}

/// Mixture of experts: router, top-k and SwiGLU experts.
fn moe_rule(s: &Sizes) -> OpRule {
    let e = s.e;
    let y = s.y();
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let Op::Moe {
        dim,
        hidden,
        num_experts,
        top_k,
        grouped,
        renormalize,
    } = &s.node.op
    else {
        unreachable!("moe_rule: not a mixture of experts")
    };
    if *grouped {
        return moe_grouped_rule(s, [*dim, *hidden, *num_experts, *top_k], *renormalize);
    }
    let t = s.rows(*dim);
    let routed = t * top_k;
    let saved = vec![
        InputContiguous(0),
        Internal {
            what: "router softmax",
            bytes: t * num_experts * e,
        },
        Internal {
            what: "top-k values (saved by the renormalising div), their sum, int64 indices",
            bytes: routed * (e + 8) + t * e,
        },
        Internal {
            what: "routing positions (int64 nonzero)",
            bytes: routed * 16,
        },
        Internal {
            what: "expert inputs (gathered rows)",
            bytes: routed * dim * e,
        },
        Internal {
            what: "w1 output, silu output, w3 output, gated hidden",
            bytes: 4 * routed * hidden * e,
        },
        Internal {
            what: "w2 output, routing weight, weighted output (index_add_ saves its source)",
            bytes: routed * (2 * dim + 1) * e,
        },
    ];
    // Experts run in reverse in backward; the first one's `w2 * weight` backward (its
    // output's gathered gradient, the gradient of w2's output and a product temporary)
    // is the highest point, with routing assumed uniform over the experts.
    let per_expert = routed.div_ceil(*num_experts);
    let mut r = OpRule::new(Output::New(y), saved, one, Calibrated("calibrated on sim-moe"))
        .fwd(routed * e)
        .note("router, top-k, SwiGLU experts on their routed tokens: saves the gathered rows, every expert hidden state and each expert's weighted output; forward also holds the renormalised top-k values; backward peaks in the first expert's backward (routing assumed uniform: the real split is random)");
    let first = 3 * per_expert * dim * e;
    r.backward_peak = Some(BackwardPeak {
        freed: first,
        held: first,
        params: vec![],
    });
    r
}

/// Mixture of experts in transformers 5's layout (`layout: "grouped"`): the router
/// (`MixtralTopKRouter`: linear, softmax, topk, with `renormalize` an in-place `/=` by the sum)
/// and `grouped_mm_experts_forward` (integrations/moe.py, the default experts implementation):
/// the T x k routed rows sorted by expert (`torch.sort`), gathered (`hidden_states[perm //
/// top_k]`), one `grouped_mm` with the 3-D `gate_up_proj`, `act(gate) * up` on its chunks, one
/// `grouped_mm` with `down_proj`, times the sorted weights, un-sorted (`[inv_perm]`) and summed
/// over k (no `index_add_`, no per-expert loop: nothing depends on how the tokens split).
/// What each call saves (derivatives.yaml) was checked on a single `MixtralSparseMoeBlock`
/// with saved-tensor hooks and the counting allocator: every byte of the list below.
fn moe_grouped_rule(
    s: &Sizes,
    [dim, hidden, experts, top_k]: [u64; 4],
    renormalize: bool,
) -> OpRule {
    let e = s.e;
    let t = s.rows(dim);
    let routed = t * top_k;
    use Saved::*;
    let mut saved = vec![
        // The router's linear saves its input.
        InputContiguous(0),
        Internal {
            what: "router softmax (saved by softmax), int64 top-k indices (saved by topk)",
            bytes: t * experts * e + t * top_k * 8,
        },
        Internal {
            what: "int64 sort permutations: perm // top_k and perm (saved by the two gathers as indices), inv_perm (saved by the un-sorting gather); the int32 grouped_mm offsets",
            bytes: 3 * routed * 8 + experts * 4,
        },
        Internal {
            what: "gathered rows sorted by expert (saved by the gate_up grouped_mm)",
            bytes: routed * dim * e,
        },
        Internal {
            what: "gate_up output (its chunks saved by act and the product), act output and gated hidden (saved by the product and the down grouped_mm)",
            bytes: 4 * routed * hidden * e,
        },
        Internal {
            what: "down output and the sorted routing weights (saved by the weighting product)",
            bytes: routed * (dim + 1) * e,
        },
    ];
    if renormalize {
        saved.push(Internal {
            what: "top-k values and their sum (saved by the in-place `/=`)",
            bytes: (routed + t) * e,
        });
    }
    let mut r = OpRule::new(Output::New(s.y()), saved, vec![Grad::New], Source::TorchSource)
        // At the un-sorting gather: the weighted rows in expert order and in token order
        // (the output, T rows, comes after the first is freed), the sorted expert ids and
        // their float copy for histc, the router logits the caller still holds.
        .fwd(2 * routed * dim * e - t * dim * e + routed * (8 + e) + t * experts * e)
        .note("transformers 5 grouped_mm experts: router, tokens sorted by expert, one grouped_mm each for the 3-D gate_up_proj and down_proj, weighted, un-sorted, summed over k; saves the gathered rows, the gate_up output, act output, gated hidden, down output and int64 permutations; no per-expert loop, so the split of tokens over experts does not change the memory");
    // Backward's highest point, in the weighting product's backward (its first node but the
    // un-sorting gather's): the gather's [R, d] gradient (`index_backward`: zeros +
    // index_put_) and the product's two [R, d] products (grad * weight, grad * down output
    // before its sum to [R, 1]); the incoming gradient is gone by then unless held elsewhere.
    // A single MixtralSparseMoeBlock holding its incoming gradient peaks at 3 R d e less 2 KB
    // (T = 256) and 16 KB (T = 2048) over the level.
    let rows3 = 3 * routed * dim * e;
    r.backward_peak = Some(BackwardPeak {
        freed: rows3 - t * dim * e,
        held: rows3,
        params: vec![],
    });
    r
}

/// Recurrent layers: oneDNN LSTM and torch's generic GRU cell loop.
fn rnn_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let e = s.e;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let (Op::Lstm(r) | Op::Gru(r)) = &s.node.op else {
        unreachable!("rnn_rule: not a recurrent layer")
    };
    let lstm = matches!(node.op, Op::Lstm(_));
    let (b, t) = (s.dim(0), s.dim(1));
    let h = r.hidden_size;
    let dirs = r.directions();
    let bth = b * t * h * e;
    let layers = r.num_layers;
    let mut saved = vec![Out];
    saved.push(Internal {
        what: "time-major copy of the input",
        bytes: x,
    });
    if layers > 1 {
        saved.push(Internal {
            what: "inner layers' outputs",
            bytes: (layers - 1) * bth * dirs,
        });
    }
    let states = layers * dirs * b * h * e;
    // The extra B x T x H a multi-layer GRU holds (see the GRU workspace below).
    let multi = if layers > 1 { bth } else { 0 };
    if lstm {
        // 15.5 x B x T x H x 4 bytes per layer (measured, unidirectional, 1 and 2
        // layers); a bidirectional layer holds 19.625 per direction (measured on one
        // configuration: 2 layers, H = 128).
        let per = if dirs > 1 { 157 } else { 124 };
        saved.push(Internal {
            what: "oneDNN workspace (15.5 BTH per layer and direction; 19.6 bidirectional)",
            bytes: layers * dirs * bth * per / 8,
        });
        saved.push(Internal {
            what: "zero initial state (h0 = c0)",
            bytes: states,
        });
    } else {
        // Per layer and direction, the cell loop's per-step tensors: 7 x B x T x H; plus
        // one B x T x H per inner layer (measured on two 2-layer bidirectional GRUs).
        // One more B x T x H for a multi-layer GRU, however many layers: it was
        // `(layers - 1) x B x T x H`, which fitted the 2-layer fixtures and counted
        // (layers - 2) x B x T x H too much from 3 layers on (measured on sim-gru3bi and
        // sim-gru4bi: their forwards ended one and two B x T x H high).
        let ws = layers * dirs * 7 * bth + multi;
        saved.push(Internal {
            what: "per-step gate tensors (7 BTH per layer and direction)",
            bytes: ws,
        });
    }
    // The largest layer's weights (oneDNN reorders them in both passes).
    let gates = if lstm { 4 } else { 3 };
    // The largest layer's weights W_ih and W_hh, which oneDNN reorders (calibrated on the
    // recurrent fixtures, with ~19 KB of fixed scratch not counted).
    let widest_input = if layers > 1 {
        r.input_size.max(h * dirs)
    } else {
        r.input_size
    };
    let w_hh = gates * h * (widest_input + h) * 4;
    let (fwd, bwd) = if lstm && dirs > 1 {
        // Bidirectional: calibrated on one configuration (sim-lstm2bi: 2 layers, H = 128).
        (2 * states + bth * dirs + w_hh, bth * dirs * 13 / 8 + w_hh)
    } else if lstm {
        // From H = 256 on, backward holds one more W_hh and a quarter W_ih per layer
        // (calibrated on sim-lstm-h256-t32 and sim-lstm-h512-t16, flat in B and T; absent
        // at H = 128).
        let big = if h >= 256 {
            layers * dirs * (4 * h * h * 4 + 4 * h * r.input_size)
        } else {
            0
        };
        (
            2 * states + bth * dirs * 33 / 8 + w_hh,
            bth * dirs * 171 / 32 + w_hh + big,
        )
    } else {
        {
            // The inner layers' extra B x T x H appears after the forward's peak and is
            // gone by the backward's (calibrated on sim-gru2bi, sim-gru3bi, sim-gru4bi).
            let inner = multi;
            (
                (states + bth * dirs * 3).saturating_sub(inner),
                bth * dirs / 2,
            )
        }
    };
    let calibrated = if lstm {
        Calibrated(
            "calibrated on sim-lstm, sim-lstm2, sim-lstm2bi, sim-lstm-h256-t32, sim-lstm-h512-t16",
        )
    } else {
        Calibrated("calibrated on sim-gru, sim-gru2bi, sim-gru3bi, sim-gru4bi")
    };
    let mut rule = OpRule::new(Output::New(y), saved, one, calibrated).fwd(fwd);
    if !lstm {
        // GRU on CPU is torch's generic cell loop: backward walks the steps back,
        // freeing each step's saved tensors, while W_hh's gradient accumulates over the
        // steps (the running sum, a step's contribution and its transposed product:
        // three W_hh-sized buffers). Measured: flat in B and T, 3 W_hh within 1-2%.
        // Less the output's gradient, which the runs show is gone by then.
        let w_hh = 3 * h * h * 4 * dirs;
        let g = (3 * w_hh).saturating_sub(y + multi);
        rule.backward_peak = Some(BackwardPeak {
            freed: g,
            held: g,
            params: vec![],
        });
    }
    if lstm && layers > 1 {
        // Layers run backward last to first, each freeing its workspace when done: the
        // peak is in the last layer's backward, with its input's gradient and its own
        // weight gradients.
        let per_layer = 4 * dirs as usize;
        let last: Vec<usize> =
            ((layers as usize - 1) * per_layer..layers as usize * per_layer).collect();
        let g = bwd + bth * dirs;
        rule.backward_peak = Some(BackwardPeak {
            freed: g,
            held: g,
            params: last,
        });
    } else {
        rule = rule.bwd(bwd);
    }
    let rule = rule
        .note(if lstm {
            "oneDNN LSTM: saves 15.5 x B x T x H float32 workspace per layer, its output and a time-major copy of its input; the output is a transposed (non-contiguous) view"
        } else {
            "GRU (torch's generic cell loop on CPU): saves 7 x B x T x H + B x T x E per layer, its output and a time-major copy of its input; the output is a transposed view; backward frees per-step tensors as it walks back in time while W_hh's gradient accumulates: its peak is three W_hh-sized buffers over the level before it"
        });
    let mut rule = rule;
    rule.output_contiguous = Some(false);
    rule
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

fn is_identity(node: &Node) -> bool {
    match &node.op {
        Op::Permute { dims } => {
            let r = dims.len() as i64;
            dims.iter()
                .enumerate()
                .all(|(i, d)| (if *d < 0 { d + r } else { *d }) == i as i64)
        }
        _ => false,
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
fn unary(f: crate::ops::UnaryFn, x: u64, y: u64) -> OpRule {
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
pub(super) const SDPA_LOGSUMEXP: &str = "logsumexp B x H x Tq float32";
pub(super) const SDPA_BOOL_MASK: &str =
    "the bool mask made additive at q's dtype (convert_boolean_attn_mask)";

/// The threads the harness runs CPU torch with (every CPU row records them: `device.cores`).
pub const HARNESS_CPU_THREADS: u64 = 2;

/// CPU flash sdpa's backward scratch (`cpu_flash_attention_backward`,
/// `ATen/native/cpu/FlashAttentionKernel.cpp`): per thread, float32 `attn` and `grad_attn`
/// blocks of q_split x kv_split and a `dsum` of q_split, where q_split is 256 from 768 query
/// tokens, 64 from 192, else 32, and kv_split 512, each at most its sequence length (`tq`
/// queries, `tk` keys).
fn flash_backward_scratch(tq: u64, tk: u64) -> u64 {
    let q_split = match tq {
        768.. => 256,
        192.. => 64,
        _ => 32,
    }
    .min(tq);
    let kv_split = 512.min(tk);
    HARNESS_CPU_THREADS * (2 * q_split * kv_split + q_split) * 4
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
fn torch_mha_attention(
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
/// (`ops/parameters.rs`: in_proj_weight, or q, k and v weights with a kdim of their own; then
/// in_proj_bias; then out_proj).
pub(super) fn torch_mha_out_proj(d: u64, kdim: u64, bias: bool) -> Vec<usize> {
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
fn flash_backward_peak(q: u64, [ks, vs]: [u64; 2], y: u64, scratch: u64) -> (u64, u64) {
    let freed = q.max((2 * q + ks + vs).saturating_sub(y) + scratch);
    let held = q.max(2 * q + ks + vs + scratch);
    (freed, held)
}

/// What sdpa's math path with dropout saves after q and k: the softmax output, dropout's float
/// mask and its output (each `tt` bytes), and the context's copy for out_proj (`q` bytes).
fn math_path_tail(tt: u64, q: u64) -> [Saved; 4] {
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
fn sdpa_math_attention(
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
fn sdpa_attention(
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
