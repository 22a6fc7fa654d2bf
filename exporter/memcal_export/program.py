"""The torch.export route: draws a module that torch.fx cannot trace (transformers models, whose
forward branches on its arguments) from the aten graph `torch.export` records on the meta device.

How a node is drawn:
- Every value is classed by what it is computed from: `value` (from an input, taking a
  gradient: drawn), `ivalue` (from an int64 input alone: the attention mask transformers builds
  from a padding mask), `param` (a parameter), `pconst` (from parameters and constants only: a
  position table, T5's position bias) or `const` (from buffers and literals only: position ids,
  rotary tables, the causal mask transformers materializes while tracing). Only values are
  drawn; the others are read by the ops that take them (an `ivalue` or `const` as a memcal
  `constant`, one node per tensor).
- A module with a rule in `GROUPS` (attention classes, RMS norms, transformers' Conv1D) is drawn
  as one or a few memcal ops from the values that enter it, whatever aten ops its code runs.
- Every other aten op is drawn by `ATEN`, one entry per op (linear, embedding, layer_norm,
  batch_norm, group_norm, dropout, activations, elementwise arithmetic, views, mean, softmax,
  cat, select).
- Anything else is drawn as what torch records, a generic `aten` node (`generic.py`): an op
  with no ATEN entry, one whose entry does not fit the call (a broadcast, a strided slice, a
  select on another axis: the entry refuses and what it drew is undone), an integer or boolean
  result, a cast. What such an op reads that is not drawn (parameters, values computed from
  parameters or from an int64 input alone, constants, buffers) is drawn where it is read. A
  module drawn whole whose rule does not fit it (a cross-attention, an attribute its class
  lacks, biases on some projections only) is drawn op by op instead (`_Decline`). An op torch
  records is never refused; what the graph format cannot write (an argument that follows the
  batch outside a view or an expand, a size that is not c x B^k) raises ExportError naming it.
- Shapes in B: the program is traced at batch 3; the generic nodes' shapes are solved against a
  second trace at batch 5 (`generic.Twin`; torch.export's dynamic batch changes what
  transformers traces, e.g. its mask construction, so the drawn program stays the static one).

Transformers' masks: tracing makes transformers build its causal mask from constants, where an
eager run without a padding mask passes none and sets `is_causal`. A mask computed from constants
alone is therefore read as the module's `is_causal`. A mask computed from an input (an
`attention_mask` input: a padded batch) is one bool `constant` of its shape, computed from that
input and read by every layer's sdpa (its mask input); an attention module that reads one is
drawn op by op, as the eager run does: the Llama family then repeats k and v (transformers'
`use_gqa_in_sdpa` is false with a mask), and sdpa with dropout (BERT in training) runs its math
path.
"""

import functools

from . import generic
from .nodes import ExportError, add_node, fresh_id, torch_mha_attrs

EXAMPLE_BATCH = 3


def _name(target):
    """`aten.linear.default` -> `linear`; operator.getitem -> `getitem`."""
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__.split(".")[-1]
    return getattr(target, "__name__", str(target))


def _arg(n, i, name, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _shape(n):
    v = n.meta.get("val") if hasattr(n, "meta") else None
    return [int(d) for d in v.shape] if hasattr(v, "shape") else None


def _floating(n):
    """Whether node `n` makes a float tensor (or a tuple of them: split); true when unknown."""
    v = n.meta.get("val")
    if isinstance(v, (list, tuple)):
        return any(getattr(t, "dtype", None) is None or t.dtype.is_floating_point for t in v)
    return getattr(v, "dtype", None) is None or v.dtype.is_floating_point


def _is_node(x):
    return hasattr(x, "op") and hasattr(x, "meta")


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


# --- modules drawn whole -------------------------------------------------------------------------


class Group:
    """One call of a module drawn whole: its nodes, the values entering it and its module."""

    def __init__(self, key, path, module):
        self.key, self.path, self.module = key, path, module
        self.nodes = []
        self.inputs = []  # memcal ids of the values entering it, in order of first use
        self.kind = None  # the exporter's classifier, set when drawn
        self.notes = []  # what the module computes that its memcal op does not draw
        self.undrawn = set()  # children whose parameters its memcal op does not hold

    def unread_children(self, *drawn):
        """Children with parameters that the rule does not draw (Qwen3's q_norm and k_norm inside
        the attention): their parameters are left out, and the exporter notes them."""
        for child_name, child in self.module.named_children():
            if child_name not in drawn and any(True for _ in child.parameters()):
                self.undrawn.add(child_name)
                self.notes.append(f"`{self.path}.{child_name}` ({type(child).__name__}) inside the attention is not drawn")

    def drawn_parameters(self):
        """The parameters its memcal ops hold (by identity: a tied parameter has two names)."""
        return {id(p) for name, p in self.module.named_parameters() if name.split(".")[0] not in self.undrawn}

    def calls(self, op):
        return [n for n in self.nodes if n.op == "call_function" and _name(n.target) == op]


def _attention_core(grp, name):
    """What the attention computation inside `grp` does: backend, dropout on the probabilities,
    and whether a mask computed from an input (a padding mask) enters it."""
    sdpa = grp.calls("scaled_dot_product_attention")
    if sdpa:
        n = sdpa[0]
        mask = _arg(n, 3, "attn_mask")
        if _is_node(mask) and grp.kind(mask) in ("value", "ivalue"):
            # An ivalue mask (a padding mask alone) declines the module (`_whole`): this is a mask
            # that also takes a gradient, T5's position bias plus its padding mask.
            raise ExportError(
                f"module `{grp.path}` ({name}): its attention mask is computed from an input and from parameters "
                "(a learned position bias plus a padding mask), which no memcal op draws yet: export without "
                "attention_mask (an unpadded batch)"
            )
        return {"backend": "sdpa", "dropout": float(_arg(n, 4, "dropout_p", 0.0) or 0.0),
                "is_causal": bool(_arg(n, 5, "is_causal", False)), "enable_gqa": bool(_arg(n, 7, "enable_gqa", False))}
    soft = grp.calls("softmax") + grp.calls("_softmax")
    if not soft:
        raise ExportError(f"module `{grp.path}` ({name}): no attention (sdpa or softmax) found inside it")
    drops = [d for d in grp.calls("dropout") if _arg(d, 2, "train", True)]
    after = [d for d in drops if grp.nodes.index(d) > grp.nodes.index(soft[0])]
    p = float(_arg(after[0], 1, "p", 0.0)) if after else 0.0
    return {"backend": "eager", "dropout": p, "is_causal": False, "enable_gqa": False}


def _whole(grp, kind):
    """Whether the module's memcal op stands for its code: an eager attention whose scores pass
    through tanh (Gemma 2's logit soft-capping) is not, nor one whose mask is computed from an
    input (a padding mask: memcal's attention ops take none); each is drawn op by op."""
    eager = grp.calls("softmax") or grp.calls("_softmax")
    if eager and grp.calls("tanh") and not grp.calls("scaled_dot_product_attention"):
        return False
    masks = [_arg(n, 3, "attn_mask") for n in grp.calls("scaled_dot_product_attention")]
    masks += [a for n in grp.calls("add") + grp.calls("add_") + grp.calls("masked_fill") for a in n.args[:2]]
    return not any(_is_node(m) and kind(m) == "ivalue" for m in masks)


def _causal(m, core):
    return bool(getattr(m, "is_causal", core["is_causal"]))


def _mha_attrs(embed_dim, num_heads, causal, bias, core, backend=True):
    attrs = {"embed_dim": int(embed_dim), "num_heads": int(num_heads), "causal": causal, "bias": bool(bias)}
    if backend and core["backend"] == "sdpa":
        attrs["backend"] = "sdpa"
    if core["dropout"]:
        attrs["dropout"] = core["dropout"]
    return attrs


def _dropout_step(suffix, module, training):
    p = float(getattr(module, "p", 0.0)) if module is not None else 0.0
    return [(suffix, "dropout", {"p": p}, ["prev"])] if p and training else []


def _gpt2_attention(m, grp):
    """transformers' GPT2Attention: one Conv1D for q, k and v, sdpa or eager, its output Conv1D,
    then resid_dropout (drawn after the attention, like `memcal import hf`)."""
    core = _attention_core(grp, "GPT2Attention")
    if getattr(m, "is_cross_attention", False):
        raise ExportError(f"module `{grp.path}`: GPT-2 cross-attention has no memcal mapping yet")
    attrs = _mha_attrs(m.embed_dim, m.num_heads, _causal(m, core), True, core)
    return [("", "multihead_attention", attrs, ["in0"])] + _dropout_step("dropout", m.resid_dropout, m.training)


def _bert_attention(m, grp):
    """transformers' BertAttention (and RoBERTa's): self-attention with its output dense, the
    output's dropout, the residual add and its LayerNorm."""
    core = _attention_core(grp, type(m).__name__)
    s, o = m.self, m.output
    attrs = _mha_attrs(s.all_head_size, s.num_attention_heads, _causal(s, core) if s.is_decoder else False,
                       s.query.bias is not None, core)
    if len(grp.inputs) != 1:
        raise ExportError(f"module `{grp.path}`: BERT cross-attention has no memcal mapping yet")
    ln = o.LayerNorm
    return (
        [("", "multihead_attention", attrs, ["in0"])]
        + _dropout_step("dropout", o.dropout, m.training)
        + [("add", "add", {}, ["in0", "prev"]),
           ("layer_norm", "layer_norm", {"normalized_shape": int(ln.normalized_shape[0]), "bias": ln.bias is not None}, ["prev"])]
    )


# Ops a whole-module rule never counts: views, metadata and same-dtype casts.
_FREE_IN_RULES = {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "transpose", "permute",
                  "expand", "t", "alias", "detach", "lift_fresh_copy", "to", "_to_copy", "type_as", "getitem",
                  "_assert_tensor_metadata", "sym_size", "_assert_scalar", "sym_constrain_range_for_size",
                  "_assert_async", "sym_numel", "sym_stride", "dim", "size"}


def _ops_within(grp, allowed, what):
    """The module runs only ops its memcal op models, each at most as often as the rule counts
    (`allowed`: op name -> count); anything more (StableLM's partial rotary: two more cats and
    four more slices; Gemma 3's `1 + weight` norms; XGLM's mask clamp) declines the rule, and the
    module is drawn op by op."""
    counts = {}
    for n in grp.nodes:
        if n.op == "call_function":
            name = _name(n.target)
            if name not in _FREE_IN_RULES:
                counts[name] = counts.get(name, 0) + 1
    extra = sorted(f"{k} x{c - allowed.get(k, 0)}" for k, c in counts.items() if c > allowed.get(k, 0))
    if extra:
        raise ExportError(f"module `{grp.path}`: runs ops {what} does not model ({', '.join(extra)})")


def _plus(*counts):
    out = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


# What memcal's attention ops model, by part (counts of aten calls in one module call).
_ROTARY = {"slice": 4, "neg": 2, "cat": 2, "mul": 4, "add": 2}  # rotate_half on q and k
# The attention itself, and its output made contiguous for the output projection
# (transformers' `attn_output.transpose(1, 2).contiguous()`).
_SDPA = {"scaled_dot_product_attention": 1, "contiguous": 1}
_EAGER = {"matmul": 2, "bmm": 2, "softmax": 1, "_softmax": 1, "dropout": 1, "mul": 1, "div": 1, "add": 1,
          "contiguous": 1}
_QK_RMS = {"mean": 2, "pow": 2, "rsqrt": 2, "mul": 4, "add": 2}  # per-head RMS norms of q and k


def _gqa_attention(m, grp):
    """Llama-family attention (q_proj, k_proj, v_proj, o_proj, a head_dim): Llama, Mistral,
    Qwen2, Gemma. Rotary tables are constants (not drawn). K and V are repeated to every head
    unless sdpa takes them unrepeated: transformers passes `enable_gqa` when no mask is given,
    which is the eager run of a mask built from constants."""
    core = _attention_core(grp, type(m).__name__)
    hd = int(m.head_dim)
    q, k, o = m.q_proj, m.k_proj, m.o_proj
    heads, kv = q.out_features // hd, k.out_features // hd
    attrs = {"embed_dim": int(q.in_features), "num_heads": heads, "num_kv_heads": kv}
    if heads * hd != q.in_features:
        attrs["head_dim"] = hd
    biased = [p.bias is not None for p in (q, k, m.v_proj)]
    if any(biased) and not all(biased):
        # BEiT: biased q and v, an unbiased k; memcal's op biases all three or none.
        raise ExportError(f"module `{grp.path}`: biases on some of q, k and v only")
    if q.bias is not None:
        attrs["bias"] = True if o.bias is not None else "qkv"
    elif o.bias is not None:
        raise ExportError(f"module `{grp.path}`: a biased output projection after unbiased q, k and v")
    if not _causal(m, core):
        attrs["causal"] = False
    attrs["repeat_kv"] = core["backend"] != "sdpa"
    if core["dropout"]:
        attrs["dropout"] = core["dropout"]
    if len(grp.inputs) != 1:
        raise ExportError(f"module `{grp.path}`: gqa cross-attention has no memcal op")
    drawn = ["q_proj", "k_proj", "v_proj", "o_proj"]
    norms = [getattr(m, c, None) for c in ("q_norm", "k_norm")]
    if all(n is not None and _rms_like(n) and int(n.weight.shape[0]) == hd for n in norms):
        # Qwen3: q and k RMS-normalized per head over head_dim before rotary and attention.
        attrs["qk_norm"] = True
        drawn += ["q_norm", "k_norm"]
    grp.unread_children(*drawn)
    core_ops = _SDPA if core["backend"] == "sdpa" else _EAGER
    _ops_within(grp, _plus({"linear": 4}, _ROTARY, core_ops, _QK_RMS if attrs.get("qk_norm") else {}),
                "gqa_attention")
    return [("", "gqa_attention", attrs, ["in0"])]


def _bart_attention(m, grp):
    """BART-family attention (q_proj, k_proj, v_proj, out_proj, embed_dim, num_heads): BART,
    OPT, Whisper, Marian. Self-attention, or cross-attention on a second input."""
    core = _attention_core(grp, type(m).__name__)
    if m.k_proj.in_features != m.embed_dim:
        raise ExportError(f"module `{grp.path}`: a memory of width {m.k_proj.in_features} != embed_dim {m.embed_dim}")
    if (m.q_proj.bias is None) != (m.out_proj.bias is None):
        # GPT-Neo: q, k and v without biases, out_proj with one; memcal's attention has all or none.
        raise ExportError(f"module `{grp.path}`: biases on some projections only")
    cross = len(grp.inputs) > 1
    attrs = _mha_attrs(m.embed_dim, m.num_heads, bool(getattr(m, "is_causal", False)) and not cross,
                       m.q_proj.bias is not None, core)
    # The query scaled by a mul (BART's `q_proj(x) * scaling`), the attention itself.
    _ops_within(grp, _plus({"linear": 4, "mul": 1}, _SDPA if core["backend"] == "sdpa" else _EAGER),
                "multihead_attention")
    return [("", "multihead_attention", attrs, ["in0"] + (["in1"] if cross else []))]


def _t5_attention(m, grp):
    """transformers' T5Attention: no biases, relative position buckets in the first layer of
    each stack (the later layers read its bias: a constant of the parameters, not drawn), a float
    mask, so sdpa runs its math path on CPU: drawn as eager, like `memcal import hf`."""
    core = _attention_core(grp, "T5Attention")
    attrs = _mha_attrs(m.d_model, m.n_heads, bool(m.is_decoder) and len(grp.inputs) == 1, False, core, backend=False)
    if m.has_relative_attention_bias:
        attrs["relative_attention_buckets"] = int(m.relative_attention_num_buckets)
    if m.inner_dim != m.d_model:
        raise ExportError(f"module `{grp.path}`: T5 attention with inner_dim {m.inner_dim} != d_model {m.d_model}")
    return [("", "multihead_attention", attrs, ["in0"] + (["in1"] if len(grp.inputs) > 1 else []))]


def _torch_mha(m, grp):
    """torch's nn.MultiheadAttention drawn whole (`torch_mha_attrs`, shared with the fx route):
    need_weights=False is sdpa (nn.TransformerEncoderLayer's call), read off the aten graph with
    its dropout and is_causal. Masks other than causal have no memcal attribute."""
    for n in grp.calls("scaled_dot_product_attention") + grp.calls("baddbmm"):
        mask = _arg(n, 3, "attn_mask") if _name(n.target) == "scaled_dot_product_attention" else n.args[0]
        if _is_node(mask) and grp.kind(mask) != "literal":
            raise ExportError(f"module `{grp.path}` (MultiheadAttention): an attn_mask or key_padding_mask; memcal's "
                              "multihead_attention takes none (is_causal without a mask tensor is causal)")
    core = _attention_core(grp, "MultiheadAttention")
    cross = len(grp.inputs) > 1
    attrs = torch_mha_attrs(m, f"module `{grp.path}`", cross=cross, sdpa=core["backend"] == "sdpa",
                            causal=core["is_causal"], dropout=core["dropout"])
    if len(grp.inputs) > 2:
        raise ExportError(f"module `{grp.path}` (MultiheadAttention): attention with different key and value inputs")
    if "impl" not in attrs:
        grp.notes.append(f"`{grp.path}`: nn.MultiheadAttention's eager path (need_weights=True) is drawn with "
                         "memcal's eager attention rule, whose saved tensors are not those of torch's own code "
                         "(measured: +4.61% on a cross-attention case)")
    return [("", "multihead_attention", attrs, ["in0"] + (["in1"] if cross else []))]


def _rms(m, grp):
    return [("", "rms_norm", {"dim": int(m.weight.shape[0])}, ["in0"])]


def _conv1d(m, grp):
    """transformers' Conv1D: a linear with its weight stored [in, out] (view, addmm, view)."""
    return [("", "linear", {"in_features": int(m.weight.shape[0]), "out_features": int(m.nf), "bias": True}, ["in0"])]


def _rms_like(m):
    return (type(m).__name__.endswith("RMSNorm") or type(m).__name__ == "T5LayerNorm") and \
        getattr(m, "weight", None) is not None and m.weight.dim() == 1


def _has(m, *names):
    return all(hasattr(m, n) for n in names)


# One table: how each module class drawn whole is recognised and drawn.
GROUPS = [
    ("GPT-2 attention", lambda m: type(m).__name__ == "GPT2Attention", _gpt2_attention),
    ("BERT attention", lambda m: _has(m, "self", "output") and _has(getattr(m, "self"), "query", "key", "value")
     and _has(getattr(m, "output"), "dense", "LayerNorm"), _bert_attention),
    ("T5 attention", lambda m: type(m).__name__ == "T5Attention", _t5_attention),
    ("Llama-family attention", lambda m: type(m).__name__.endswith("Attention")
     and _has(m, "q_proj", "k_proj", "v_proj", "o_proj", "head_dim"), _gqa_attention),
    ("BART-family attention", lambda m: type(m).__name__.endswith("Attention")
     and _has(m, "q_proj", "k_proj", "v_proj", "out_proj", "embed_dim", "num_heads"), _bart_attention),
    ("torch MultiheadAttention", lambda m: type(m).__name__ == "MultiheadAttention"
     and type(m).__module__.startswith("torch.nn"), _torch_mha),
    ("RMS norm", _rms_like, _rms),
    ("transformers Conv1D", lambda m: type(m).__name__ == "Conv1D" and _has(m, "nf", "weight"), _conv1d),
]


def _group_rule(m):
    for _, match, draw in GROUPS:
        if match(m):
            return draw
    return None


# --- aten ops ------------------------------------------------------------------------------------

UNARY = {"exp", "log", "sqrt", "rsqrt", "sigmoid", "neg", "abs", "sin", "cos", "erf", "reciprocal"}
ACTIVATIONS = {"relu": "relu", "relu_": "relu", "silu": "silu", "silu_": "silu"}
BINARY = {"add": "add", "add_": "add", "sub": "sub", "mul": "mul", "mul_": "mul", "div": "div"}
RESHAPES = {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten"}
# Ops that return their input (or the same values): drawn as the input itself.
ALIASES = {"alias", "contiguous", "clone", "detach", "lift_fresh_copy", "to", "_to_copy", "type_as"}
# memcal ops named by the module that runs them alone (its path is the node id).
OWN_OPS = {"linear", "conv2d", "embedding", "layer_norm", "batch_norm", "group_norm", "dropout", "gelu", "relu", "silu",
           "tanh", "softmax"}
# Views through which an op reads a parameter it holds (nn.MultiheadAttention's in_proj_bias).
PARAM_VIEWS = {"slice", "select", "view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "t", "transpose",
               "permute", "expand", "alias", "split", "chunk", "getitem"}
# Ops with no tensor to draw.
IGNORED = {"_assert_tensor_metadata", "sym_size", "_assert_scalar", "sym_constrain_range_for_size",
           "_assert_async", "sym_numel", "sym_stride"}


class _Decline(Exception):
    """A module drawn whole whose rule does not fit it: the program is drawn again with that
    module drawn op by op."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


class _Program:
    def __init__(self, ep, root, input_names, index_lists=None, twin=None, declined=()):
        self.ep, self.root = ep, root
        self.input_names = input_names
        self.index_lists = index_lists  # lifted constant -> the Python list it was made from
        self.nodes = []
        self.extra_inputs = []
        self.ids, self.kinds, self.alias = {}, {}, {}
        self.params = {}  # placeholder -> parameter tensor
        self.targets = {}  # placeholder -> state name
        self.tables = {}  # embedding of constant indices -> its weight placeholder
        self.splits = {}  # split node -> (its input, axis, piece bounds), read by getitem
        self.constants = {}  # constant tensor node -> the memcal id of its `constant` node
        self.empty = set()  # value nodes with no elements (an empty slice), read only by a cat
        self.gqa = {}  # sdpa node -> (k, v) before transformers' repeat_kv, which the eager run skips
        self.skipped = set()  # the repeat_kv nodes of those: not drawn
        self.embedded = {}  # weight placeholder -> the memcal id of the embedding that owns it
        self.used = set(input_names)
        self.groups = {}
        self.group_of = {}
        self.modules = dict(root.named_modules())
        self.notes = []  # approximations: what the model computes that the graph does not draw
        self.drawn = set()  # the parameters the graph's ops hold (ids of the tensors)
        self.undrawn = 0  # elements of the parameters no op holds (named in a note)
        self.declined = set(declined)  # modules whose rule does not fit them: drawn op by op
        self.generic = generic.Generic(self, twin)  # ops no memcal op stands for

    # classification --------------------------------------------------------------------------

    def resolve(self, n):
        while n in self.alias:
            n = self.alias[n]
        return n

    def kind(self, x):
        if not _is_node(x):
            return "literal"
        return self.kinds.get(self.resolve(x), "const")

    def classify(self):
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        users = iter(self.input_names)
        for n in self.ep.graph.nodes:
            if n.op == "placeholder":
                spec = specs[n.name]
                kind = spec.kind.name
                if kind == "PARAMETER":
                    self.kinds[n] = "param"
                    self.params[n] = self.root.get_parameter(spec.target)
                elif kind == "USER_INPUT" and _shape(n) is not None:
                    self.kinds[n] = "value"
                    self.ids[n] = next(users)
                else:
                    self.kinds[n] = "const"
                self.targets[n] = spec.target
            elif n.op == "call_function":
                args = [a for a in _flat(list(n.args) + list(n.kwargs.values())) if _is_node(a)]
                ins = [self.kind(a) for a in args]
                params = "param" in ins or "pconst" in ins
                if "value" in ins or "ivalue" in ins:
                    # Computed from the inputs: a value that takes a gradient when a float value
                    # or a parameter enters it (an embedding of the ids), else an "ivalue": a
                    # mask or ids computed from an int64 input (transformers' attention mask
                    # from a padding mask), drawn only where an op reads it, as a constant.
                    grad = params or any(k == "value" and _floating(a) for k, a in zip(ins, args))
                    self.kinds[n] = "value" if grad else "ivalue"
                else:
                    self.kinds[n] = "pconst" if params else "const"
                if self.is_alias(n):
                    self.alias[n] = n.args[0]

    def is_alias(self, n):
        name = _name(n.target)
        x = n.args[0] if n.args else None
        if not _is_node(x):
            return False
        same = _shape(x) is not None and _shape(x) == _shape(n)
        if name in ALIASES:
            v, u = n.meta.get("val"), x.meta.get("val")
            cast = hasattr(v, "dtype") and hasattr(u, "dtype") and v.dtype != u.dtype
            if cast and (self.kind(x) == "value" or str(v.dtype) == "torch.bool"):
                # A cast: a new tensor (a padding mask cast to bool, drawn where it is read; a
                # value cast to another dtype, a generic node; MPT's float mask made bool for
                # masked_fill, a bool constant).
                return False
            return True
        if name == "dropout":
            return not _arg(n, 2, "train", True) or float(_arg(n, 1, "p", 0.5)) == 0.0
        if name in ("slice", "expand") or name in RESHAPES:
            return same and self.kind(x) != "param"
        return False

    def module_stack(self, n):
        return list((n.meta.get("nn_module_stack") or {}).items())

    def short(self, path):
        parts = path.split(".")
        return ".".join(parts[1:]) if parts and parts[0] == "model" else path

    def innermost(self, n):
        stack = self.module_stack(n)
        return stack[-1][1][0] if stack else "model"

    def where(self, n):
        path = self.innermost(n)
        m = self.modules.get(path)
        if m is None or not self.short(path):
            return f"the top module ({type(self.root.model).__name__})"
        return f"module `{self.short(path)}` ({type(m).__name__})"

    def assign_groups(self):
        """Each aten node joins the outermost module drawn whole that runs it. A module whose code
        its memcal op cannot stand for (`_whole`) is drawn op by op: its children are grouped
        again."""
        declined = set(self.declined)
        while True:
            self.groups, self.group_of = {}, {}
            for n in self.ep.graph.nodes:
                if n.op != "call_function":
                    continue
                for key, (path, _) in self.module_stack(n):
                    m = self.modules.get(path)
                    if key not in declined and m is not None and _group_rule(m) is not None:
                        grp = self.groups.setdefault(key, Group(key, self.short(path), m))
                        grp.nodes.append(n)
                        self.group_of[n] = grp
                        break
            more = {key for key, grp in self.groups.items() if not _whole(grp, self.kind)}
            if not more:
                return
            declined |= more

    # drawing ---------------------------------------------------------------------------------

    def emit(self, base, op, attrs, inputs):
        return add_node(self.nodes, self.used, base, op, attrs, inputs)

    def base_id(self, n, op):
        path = self.innermost(n)
        m = self.modules.get(path)
        leaf = m is not None and not list(m.children())
        short = self.short(path)
        if leaf and short and op in OWN_OPS:
            return short
        return f"{short}.{op}" if short else op

    def id_of(self, x, n):
        r = self.resolve(x)
        if r not in self.ids:
            raise ExportError(f"aten node `{n.name}` ({self.where(n)}): its input `{r.name}` was not drawn")
        return self.ids[r]

    def run(self):
        self.classify()
        _mark_tables(self)
        _mark_repeat_kv(self)
        self.assign_groups()
        last = {}
        for n in self.ep.graph.nodes:
            grp = self.group_of.get(n)
            if grp is not None and self.kinds.get(n) == "value" and n not in self.alias:
                last[grp.key] = n
        for n in self.ep.graph.nodes:
            if n.op == "output":
                out = n.args[0]
                while isinstance(out, (list, tuple)):
                    out = out[0]
                self.output = self.resolve(out)
                continue
            if n.op != "call_function" or n in self.alias or self.kinds.get(n) != "value" or n in self.skipped:
                continue
            grp = self.group_of.get(n)
            if grp is not None:
                if last.get(grp.key) is n:
                    self.draw_group(grp)
                continue
            name = _name(n.target)
            if name in IGNORED:
                continue
            handler = ATEN.get(name)
            if handler is None or not self.floating_result(n, name):
                self.generic.draw(n)  # no memcal op stands for it: the generic `aten` node
                continue
            saved = self.checkpoint()
            try:
                handler(self, n)
            except ExportError:
                # Its memcal op does not fit this call (a shape, a layout, a broadcast): drawn as
                # what torch records.
                self.rollback(saved, n)
                self.generic.draw(n)
        self.notes.extend(self.generic.finish())
        self.note_undrawn()

    def checkpoint(self):
        return len(self.nodes), len(self.extra_inputs), set(self.drawn)

    def rollback(self, saved, n):
        """Undoes what an ATen entry drew before it refused node `n`."""
        nodes, extra, drawn = saved
        gone = {e["id"] for e in self.nodes[nodes:]} | {e["name"] for e in self.extra_inputs[extra:]}
        del self.nodes[nodes:]
        del self.extra_inputs[extra:]
        self.used -= gone
        self.drawn = drawn
        for table in (self.ids, self.constants, self.embedded):
            for k in [k for k, v in table.items() if v in gone]:
                del table[k]
        self.empty.discard(n)
        self.splits.pop(n, None)

    def note_undrawn(self):
        """Every parameter of the model is held by a drawn op, or named in a note."""
        left, count = [], 0
        for name, p in self.root.named_parameters():  # tied parameters are listed once
            if id(p) not in self.drawn:
                left.append(self.short(name))
                count += p.numel()
        if left:
            shown = ", ".join(left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
            self.notes.append(f"{count:,} parameters no memcal op holds ({shown})")
        self.undrawn = count

    def floating_result(self, n, name):
        """memcal's ops draw float values; an integer or boolean one computed from them (an
        argmax, a routing index) is a generic node."""
        v = n.meta.get("val")
        return name == "embedding" or not hasattr(v, "dtype") or v.dtype.is_floating_point

    def draw_group(self, grp):
        members = set(grp.nodes)
        grp.kind = self.kind
        for n in grp.nodes:
            for a in _flat(list(n.args) + list(n.kwargs.values())):
                if _is_node(a) and self.kind(a) == "value":
                    r = self.resolve(a)
                    if r not in members:
                        i = self.id_of(r, n)
                        if i not in grp.inputs:
                            grp.inputs.append(i)
        outputs = {self.resolve(u_in) for u in self.ep.graph.nodes if u not in members
                   for u_in in _flat(list(u.args) + list(u.kwargs.values()))
                   if _is_node(u_in) and self.resolve(u_in) in members and self.kind(u_in) == "value"}
        try:
            if len(outputs) > 1:
                raise ExportError(f"module `{grp.path}` ({type(grp.module).__name__}): more than one of its values is read outside it")
            if not grp.inputs:
                raise ExportError(f"module `{grp.path}` ({type(grp.module).__name__}): no drawn value enters it")
            steps = _group_rule(grp.module)(grp.module, grp)
        except (ExportError, AttributeError):
            # The rule does not fit this module (a cross-attention, a mask it takes none of, an
            # attribute its class lacks): drawn op by op instead.
            raise _Decline(grp.key)
        if self.reads_undrawn(grp):
            # A child the rule leaves out that the module's code reads (OLMo-2's full-width q
            # and k norms): drawn op by op, so nothing it computes is left out.
            raise _Decline(grp.key)
        self.notes.extend(grp.notes)
        self.drawn.update(grp.drawn_parameters())
        prev = None
        for suffix, op, attrs, refs in steps:
            ins = [prev if r == "prev" else grp.inputs[int(r[2:])] for r in refs]
            prev = self.emit(f"{grp.path}.{suffix}" if suffix else grp.path, op, attrs, ins)
        for o in outputs:
            self.ids[o] = prev

    def reads_undrawn(self, grp):
        """Whether a node of `grp` reads a parameter of a child its rule does not draw."""
        prefixes = tuple(f"{grp.path}.{c}." for c in grp.undrawn)
        if not prefixes:
            return False
        return any(_is_node(a) and self.kinds.get(a) == "param" and self.targets.get(a, "").startswith(prefixes)
                   for n in grp.nodes for a in _flat(list(n.args) + list(n.kwargs.values())))

    def through_expand(self, n):
        """The tensor an expand broadcasts (a class token's parameter), else `n` resolved."""
        r = self.resolve(n)
        while r not in self.params and r.op == "call_function" and _name(r.target) == "expand":
            r = self.resolve(r.args[0])
        return r

    def origin(self, n):
        """The placeholder a chain of first arguments starts from (a buffer behind its casts,
        slices and expands)."""
        r = self.resolve(n)
        while r.op == "call_function" and r.args and _is_node(r.args[0]):
            r = self.resolve(r.args[0])
        return r

    def put(self, n, op, attrs, inputs, base=None):
        for a in _flat(list(n.args) + list(n.kwargs.values())):
            r = self.through_expand(a) if _is_node(a) else None
            while r is not None and r not in self.params and r.op == "call_function" and \
                    _name(r.target) in PARAM_VIEWS and _is_node(r.args[0]):
                r = self.resolve(r.args[0])  # a slice of a parameter (a packed in_proj_bias)
            if r in self.params:
                self.drawn.add(id(self.params[r]))
        self.ids[n] = self.emit(base or self.base_id(n, op), op, attrs, inputs)
        return self.ids[n]


def _embedding(ex, n):
    w, idx = n.args[0], n.args[1]
    wr = ex.resolve(w)
    if wr not in ex.params:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): an embedding whose table is not a parameter")
    t = ex.params[wr]
    attrs = {"num_embeddings": int(t.shape[0]), "embedding_dim": int(t.shape[1])}
    if wr in ex.embedded:  # a second embedding of the same table (T5's decoder reads `shared`)
        attrs["tie"] = ex.embedded[wr]
    if ex.kind(idx) == "ivalue":
        raise ExportError(
            f"aten node `{n.name}` ({ex.where(n)}): an embedding of ids computed from the inputs (RoBERTa's "
            "position ids from the padding); give the computed ids as an input of their own"
        )
    node_id = ex.put(n, "embedding", attrs, [ex.id_of(idx, n)])
    ex.embedded.setdefault(wr, node_id)


def _weight(ex, n, what):
    """The parameter a linear or convolution reads as its weight: (placeholder, tensor)."""
    wr = ex.resolve(n.args[1])
    if wr not in ex.params:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a {what} whose weight is computed; memcal's {what} owns its weight")
    return wr, ex.params[wr]


def _linear(ex, n):
    x, b = n.args[0], _arg(n, 2, "bias")
    wr, t = _weight(ex, n, "linear")
    attrs = {"in_features": int(t.shape[1]), "out_features": int(t.shape[0]), "bias": b is not None}
    if wr in ex.embedded:
        attrs["tie"] = ex.embedded[wr]
    ex.put(n, "linear", attrs, [ex.id_of(x, n)])


def _layer_norm(ex, n):
    shape = list(n.args[1])
    w, b = _arg(n, 2, "weight"), _arg(n, 3, "bias")
    if len(shape) != 1 or w is None:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): layer norm over {shape} (memcal's normalizes the last axis, with weights)")
    ex.put(n, "layer_norm", {"normalized_shape": int(shape[0]), "bias": b is not None}, [ex.id_of(n.args[0], n)])


def _conv2d(ex, n):
    x, b = n.args[0], _arg(n, 2, "bias")
    _, t = _weight(ex, n, "convolution")
    if t.shape[2] != t.shape[3]:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a {tuple(t.shape[2:])} kernel is not square")

    def one(v, what):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        if len(set(v)) != 1:
            raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): {what} {v} is not square")
        return int(v[0])

    stride, padding, dilation = one(_arg(n, 3, "stride", 1), "stride"), _arg(n, 4, "padding", 0), one(_arg(n, 5, "dilation", 1), "dilation")
    if isinstance(padding, str) or dilation != 1:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): padding `{padding}` / dilation {dilation} has no memcal attribute")
    groups = int(_arg(n, 6, "groups", 1))
    attrs = {"in_channels": int(t.shape[1]) * groups, "out_channels": int(t.shape[0]), "kernel_size": int(t.shape[2]),
             "stride": stride, "padding": one(padding, "padding"), "groups": groups, "bias": b is not None}
    node_id = ex.put(n, "conv2d", attrs, [ex.id_of(x, n)])
    if _channels_last(x):
        ex.notes.append(f"conv2d `{node_id}`: its input is a channels-last view, so oneDNN runs "
                        "the convolution in channels-last; its scratch there (chosen by oneDNN at run time, "
                        "large in the backward of a depthwise conv) is not in memcal's conv rule, which counts "
                        "the contiguous layout")


def _channels_last(x):
    """Whether a 4-d tensor is laid out channels-last and not contiguous (a permuted view, or
    an elementwise result that kept such a view's strides): `aten/src/ATen/native/ConvUtils.h`
    `mkldnn_conv_use_channels_last` then picks channels-last for oneDNN."""
    import torch

    v = x.meta.get("val") if _is_node(x) else None
    if not isinstance(v, torch.Tensor) or v.dim() != 4 or v.is_contiguous():
        return False
    return v.is_contiguous(memory_format=torch.channels_last)


def _norm_params(ex, n, w, b, what):
    """The weight and bias of a norm: parameters of the model, else the entry refuses."""
    for t in (w, b):
        if not _is_node(t) or ex.resolve(t) not in ex.params:
            raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a {what} without a weight and a bias")


def _batch_norm(ex, n):
    """F.batch_norm in training, with its weight, bias and running statistics: memcal's
    batch_norm (as the fx route draws nn.BatchNorm)."""
    x, w, b, mean, var = (n.args + (None,) * 5)[:5]
    _norm_params(ex, n, w, b, "batch norm")
    if not _arg(n, 5, "training", False) or not all(_is_node(t) for t in (mean, var)):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): batch norm without running statistics or in eval")
    ex.put(n, "batch_norm", {"num_features": int(_shape(x)[1])}, [ex.id_of(x, n)])


def _group_norm(ex, n):
    """F.group_norm with its weight and bias: memcal's group_norm."""
    x, groups = n.args[0], int(n.args[1])
    _norm_params(ex, n, _arg(n, 2, "weight"), _arg(n, 3, "bias"), "group norm")
    ex.put(n, "group_norm", {"num_groups": groups, "num_channels": int(_shape(x)[1])}, [ex.id_of(x, n)])


def _dropout(ex, n):
    ex.put(n, "dropout", {"p": float(_arg(n, 1, "p", 0.5))}, [ex.id_of(n.args[0], n)])


def _gelu(ex, n):
    attrs = {"approximate": "tanh"} if _arg(n, 1, "approximate", "none") == "tanh" else {}
    ex.put(n, "gelu", attrs, [ex.id_of(n.args[0], n)])


def _activation(op):
    return lambda ex, n: ex.put(n, op, {}, [ex.id_of(n.args[0], n)])


def _unary(fn):
    return lambda ex, n: ex.put(n, "unary", {"fn": fn}, [ex.id_of(n.args[0], n)], base=ex.base_id(n, fn))


def _tanh(ex, n):
    # nn.Tanh (a pooler's activation) is memcal's tanh; torch.tanh in model code is `unary`.
    m = ex.modules.get(ex.innermost(n))
    if m is not None and type(m).__name__ == "Tanh":
        ex.put(n, "tanh", {}, [ex.id_of(n.args[0], n)])
    else:
        ex.put(n, "unary", {"fn": "tanh"}, [ex.id_of(n.args[0], n)], base=ex.base_id(n, "tanh"))


def _pow(ex, n):
    e = n.args[1]
    if _is_node(e):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): pow with a tensor exponent")
    ex.put(n, "unary", {"fn": "pow", "exponent": float(e)}, [ex.id_of(n.args[0], n)], base=ex.base_id(n, "pow"))


def _scalar_of(ex, c, n):
    """The value of a 0-d constant (Gemma's embed_scale buffer): read from the buffer when it has
    data, else from the module's float of the same name (`scalar_<name>`)."""
    target = ex.targets.get(ex.origin(c))
    if target is not None:
        owner, _, attr = target.rpartition(".")
        m = ex.root.get_submodule(owner) if owner else ex.root
        t = getattr(m, attr, None)
        if t is not None and getattr(t, "device", None) is not None and t.device.type != "meta":
            return float(t)
        s = getattr(m, "scalar_" + attr, None)
        if isinstance(s, (int, float)):
            return float(s)
    raise ExportError(
        f"aten node `{n.name}` ({ex.where(n)}): multiplies by a 0-d constant whose value is not readable on the meta device"
    )


def _table_steps(ex, n, x, table, op):
    """`x + table` where table is an embedding of constant indices: a learned position table
    ([1, T, d] or [T, d], rows 0..T) or a per-token table of constant ids ([B, T, d]: BERT's
    token_type_ids buffer), which is drawn as an embedding of an input of those ids."""
    w = ex.params[ex.tables[table]]
    shp, tshape, xs = _shape(n), _shape(table), _shape(x)
    if op == "add" and tshape[-2:] == xs[-2:] and (len(tshape) == 2 or tshape[0] == 1):
        ex.drawn.add(id(w))
        ex.put(n, "learned_position", {"num_positions": int(w.shape[0]), "dim": int(w.shape[1])},
               [ex.id_of(x, n)], base=ex.base_id(table, "position"))
        return
    if op == "add" and tshape == shp and tshape[0] == EXAMPLE_BATCH:
        name = fresh_id(ex.used, ex.targets.get(ex.origin(table.args[1]), "ids").rpartition(".")[2])
        ex.extra_inputs.append({"name": name, "shape": ["B"] + tshape[1:-1], "dtype": "int64", "classes": int(w.shape[0])})
        ex.drawn.add(id(w))
        emb = ex.emit(ex.base_id(table, "embedding"), "embedding",
                      {"num_embeddings": int(w.shape[0]), "embedding_dim": int(w.shape[1])}, [name])
        ex.put(n, "add", {}, [ex.id_of(x, n), emb])
        return
    raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): `{op}` with a table of shape {tshape}")


def _binary(ex, n):
    op = BINARY[_name(n.target)]
    a, b = n.args[0], n.args[1]
    ka, kb = ex.kind(a), ex.kind(b)
    if ka == "value" and kb == "value":
        if _shape(a) != _shape(b):
            raise ExportError(
                f"aten node `{n.name}` ({ex.where(n)}): `{op}` of shapes {_shape(a)} and {_shape(b)}: memcal's "
                "elementwise ops take equal shapes (broadcasting is not drawn)"
            )
        ex.put(n, op, {}, [ex.id_of(a, n), ex.id_of(b, n)])
        return
    x, other = (a, b) if ka == "value" else (b, a)
    first = ka == "value"
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        s = float(other)
    elif _is_node(other) and ex.resolve(other) in ex.tables:
        _table_steps(ex, n, x, ex.resolve(other), op)
        return
    elif _is_node(other) and ex.resolve(other) in ex.params and op == "add":
        p = ex.params[ex.resolve(other)]
        if p.dim() == 3 and p.shape[0] == 1 and [int(d) for d in p.shape[1:]] == _shape(x)[1:]:
            # A learned table added to every sequence (ViT's position_embeddings).
            ex.put(n, "learned_position", {"num_positions": int(p.shape[1]), "dim": int(p.shape[2])},
                   [ex.id_of(x, n)], base=ex.base_id(n, "position"))
            return
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): `add` of a value and a parameter of shape {tuple(p.shape)}")
    elif _is_node(other) and _shape(other) == [] and ex.kind(other) == "const":
        s = _scalar_of(ex, other, n)
    elif _is_node(other) and ex.kind(other) in ("const", "ivalue"):
        c = _constant(ex, n, other, x)
        ex.put(n, op, {}, [ex.id_of(x, n), c] if first else [c, ex.id_of(x, n)])
        return
    else:
        raise ExportError(
            f"aten node `{n.name}` ({ex.where(n)}): `{op}` of a value and a {ex.kind(other)} tensor of shape "
            f"{_shape(other)}; memcal draws that only inside the modules it knows (attention, norms)"
        )
    if op == "add" or (op == "sub" and first):
        ex.put(n, "unary", {"fn": "add_scalar", "scalar": s if op == "add" else -s}, [ex.id_of(x, n)], base=ex.base_id(n, "add_scalar"))
    elif op == "mul" or (op == "div" and first):
        ex.put(n, "unary", {"fn": "mul_scalar", "scalar": s if op == "mul" else 1.0 / s}, [ex.id_of(x, n)], base=ex.base_id(n, "mul_scalar"))
    else:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a scalar {op} a tensor")


VIEWS = {"unsqueeze", "view", "reshape", "_unsafe_view", "expand", "squeeze"}


def _broadcasts(shape, onto):
    """Whether `shape` broadcasts to `onto` (numpy's rule) without growing it."""
    if len(shape) > len(onto):
        return False
    pad = [1] * (len(onto) - len(shape)) + list(shape)
    return all(a == b or a == 1 for a, b in zip(pad, onto))


def _constant(ex, n, c, x, onto=None):
    """The memcal `constant` node of a tensor made from constants (a rotary table, a causal mask
    built while tracing) that `n` combines with the value `x`: one node per tensor, drawn at the
    shape it is stored at (through the unsqueezes, views and expands that only broadcast it) and
    shared by every op that reads it. `onto`: the shape it broadcasts to, when not x's (a
    mask onto the scores)."""
    xs = onto or _shape(x)
    r = ex.resolve(c)
    if not _broadcasts(_shape(r), xs):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a constant of shape {_shape(r)} broadcasts the value {xs}")
    while (r.op == "call_function" and _name(r.target) in VIEWS and _is_node(r.args[0])
           and _broadcasts(_shape(ex.resolve(r.args[0])), xs)):
        r = ex.resolve(r.args[0])
    if r not in ex.constants:
        attrs = {"shape": _batched(_shape(r), xs)}
        v = r.meta.get("val")
        # The tensor the op reads may be a cast of the one stored (`mask.to(torch.bool)`: `to`
        # resolves to its input): the dtype is the read one's.
        read = c.meta.get("val") if _is_node(c) else None
        if any(getattr(t, "dtype", None) is not None and str(t.dtype) == "torch.bool" for t in (v, read)):
            attrs["dtype"] = "bool"
        elif not _floating(r):
            raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): reads a {v.dtype} tensor computed from the inputs")
        ex.constants[r] = ex.emit(ex.base_id(r, "constant"), "constant", attrs, [_batch_source(ex, r, x, n)])
    return ex.constants[r]


def _batch_source(ex, r, x, n):
    """What a constant made from the inputs reads for its batch: the graph input it is computed
    from (an attention mask of the padding mask), else the value `x` beside it."""
    if ex.kind(r) == "ivalue":
        seen, todo = set(), [r]
        while todo:
            m = todo.pop()
            if m in seen or not _is_node(m):
                continue
            seen.add(m)
            if m.op == "placeholder" and m in ex.ids:
                return ex.ids[m]
            todo.extend(a for a in _flat(list(m.args) + list(m.kwargs.values())) if _is_node(a))
    return ex.id_of(x, n)


def _reshape(ex, n):
    out = _shape(n)
    if out and out[0] == EXAMPLE_BATCH and _shape(n.args[0])[0] != EXAMPLE_BATCH and \
            int(ex.generic.twin.of(n, ex.where(n)).meta["val"].shape[0]) == EXAMPLE_BATCH:
        # A first axis of the example batch's size that is not the batch (traced again at
        # another batch, it stays): no batch axis for memcal's reshape; a generic view.
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a reshape to {out} without the batch axis")
    if out and out[0] == EXAMPLE_BATCH:
        shape = ["B"] + out[1:]
    elif out and out[0] % EXAMPLE_BATCH == 0 and _shape(n.args[0])[0] == EXAMPLE_BATCH:
        shape = [-1] + out[1:]  # the batch merged with the next axes (OPT's [B*T, d])
    else:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a reshape that moves the batch axis ({out})")
    ex.put(n, "reshape", {"shape": shape}, [ex.id_of(n.args[0], n)])


def _permute(ex, n):
    rank = len(_shape(n.args[0]))
    name = _name(n.target)
    if name == "permute":
        dims = [int(d) % rank for d in n.args[1]]
    else:
        a, b = (n.args[1], n.args[2]) if name == "transpose" else (0, 1)
        dims = list(range(rank))
        dims[a % rank], dims[b % rank] = dims[b % rank], dims[a % rank]
    if dims[0] != 0:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a permute that moves the batch axis")
    ex.put(n, "permute", {"dims": dims}, [ex.id_of(n.args[0], n)])


def _select(ex, n):
    x, dim, index = n.args[0], n.args[1], n.args[2]
    if len(_shape(x)) != 3 or dim % 3 != 1:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): select on axis {dim} (memcal draws x[:, i] of [B, T, d])")
    ex.put(n, "select_token", {"index": int(index)}, [ex.id_of(x, n)], base=ex.base_id(n, "select_token"))


def _slice(ex, n):
    """`x[..., start:end]` on one axis (step 1), the batch axis kept whole: memcal's slice."""
    x = n.args[0]
    shape = _shape(x)
    dim = int(_arg(n, 1, "dim", 0)) % len(shape)
    start, end, step = _arg(n, 2, "start"), _arg(n, 3, "end"), _arg(n, 4, "step", 1)
    if int(step) != 1 or dim == 0 or any(_is_node(v) for v in (start, end)):
        raise ExportError(
            f"aten node `{n.name}` ({ex.where(n)}): a slice of axis {dim} with step {step}; memcal's slice "
            "keeps a contiguous range (step 1) of a fixed axis other than the batch"
        )
    lo, hi, _ = slice(start, end).indices(shape[dim])
    if hi <= lo:
        ex.empty.add(n)  # read by a cat only (`_cat`)
        return
    ex.put(n, "slice", _range(shape[dim], start, end, dim), [ex.id_of(x, n)])


def _range(size, start, end, dim):
    """Python's slice bounds (None, negative, past the end) as memcal's `start` and `end`."""
    lo, hi, _ = slice(start, end).indices(size)
    if hi <= lo:
        raise ExportError(f"an empty slice [{start}:{end}] of an axis of {size}")
    return {"dim": dim, "start": lo, "end": hi} if lo else {"dim": dim, "end": hi}


def _split(ex, n):
    """`torch.split` / `chunk` (aten split, split_with_sizes, chunk): each piece read by a getitem is a
    slice; the split itself draws nothing."""
    x = n.args[0]
    shape = _shape(x)
    size_or_sizes = n.args[1]
    dim = int(_arg(n, 2, "dim", 0)) % len(shape)
    if dim == 0:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a split of the batch axis")
    if isinstance(size_or_sizes, (list, tuple)):
        sizes = [int(s) for s in size_or_sizes]
    elif _name(n.target) == "chunk":
        step = -(-shape[dim] // int(size_or_sizes))
        sizes = [min(step, shape[dim] - s) for s in range(0, shape[dim], step)]
    else:
        step = int(size_or_sizes)
        sizes = [min(step, shape[dim] - s) for s in range(0, shape[dim], step)]
    bounds, at = [], 0
    for s in sizes:
        bounds.append((at, at + s))
        at += s
    ex.splits[n] = (x, dim, bounds)


def _getitem(ex, n):
    parent, i = n.args[0], int(n.args[1])
    if parent not in ex.splits:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): item {i} of `{parent.name}`, which memcal does not draw")
    x, dim, bounds = ex.splits[parent]
    lo, hi = bounds[i]
    if (lo, hi) == (0, _shape(x)[dim]):
        ex.ids[n] = ex.id_of(x, n)
        return
    ex.put(n, "slice", _range(_shape(x)[dim], lo, hi, dim), [ex.id_of(x, n)], base=ex.base_id(n, "slice"))


def _matmul(ex, n):
    """`a @ b` of two values with the same leading axes (eager attention's scores and output)."""
    a, b = n.args[0], n.args[1]
    sa, sb = _shape(a), _shape(b)
    w = ex.resolve(b)
    if ex.kind(a) == "value" and w.op == "call_function" and _name(w.target) in ("t", "numpy_T", "permute", "transpose") \
            and ex.resolve(w.args[0]) in ex.params and len(sb) == 2:
        # `x @ weight.T` (Falcon's FalconLinear): a linear without bias.
        t = ex.params[ex.resolve(w.args[0])]
        ex.drawn.add(id(t))
        ex.put(n, "linear", {"in_features": int(t.shape[1]), "out_features": int(t.shape[0]), "bias": False},
               [ex.id_of(a, n)], base=ex.base_id(n, "linear"))
        return
    if ex.kind(a) != "value" or ex.kind(b) != "value":
        raise ExportError(
            f"aten node `{n.name}` ({ex.where(n)}): a matmul with a {ex.kind(a)} and a {ex.kind(b)} operand; memcal "
            "draws a product with a weight as `linear` (nn.Linear), and matmul of two values"
        )
    if len(sa) < 3 or len(sa) != len(sb) or sa[:-2] != sb[:-2]:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): a matmul of {sa} and {sb} (memcal's matmul takes equal leading axes)")
    ex.put(n, "matmul", {}, [ex.id_of(a, n), ex.id_of(b, n)])


def _index(ex, n):
    """`x[..., [i, i+1, ...], :]`: advanced indexing of one non-batch axis by a list of
    consecutive positions (Falcon's key and value heads) copies that range: memcal's slice and a
    copy (`add_scalar` of 0), whose backward is the slice's, a zero tensor of the input's shape."""
    x, index = n.args[0], list(n.args[1])
    shape = _shape(x)
    axes = [d for d, i in enumerate(index) if i is not None]
    lists = ex.index_lists or {}
    if len(axes) != 1 or axes[0] == 0 or ex.kind(index[axes[0]]) != "const":
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): an index of several axes, of the batch axis or by a computed tensor")
    dim, ids = axes[0], lists.get(ex.targets.get(ex.resolve(index[axes[0]])))
    if ids is None:
        raise ExportError(
            f"aten node `{n.name}` ({ex.where(n)}): an index by a tensor whose values are not readable on the meta "
            "device (memcal reads the lists of positions a model indexes with, x[..., [i, j]]); write it as a slice"
        )
    at = [i % shape[dim] for i in ids]
    if at != list(range(at[0], at[0] + len(at))):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): an index by positions {ids}, which are not one range")
    piece = ex.emit(ex.base_id(n, "slice"), "slice", _range(shape[dim], at[0], at[-1] + 1, dim), [ex.id_of(x, n)])
    ex.put(n, "unary", {"fn": "add_scalar", "scalar": 0.0}, [piece], base=ex.base_id(n, "index"))


def _mean(ex, n):
    dims = _arg(n, 1, "dim")
    if not isinstance(dims, (list, tuple)) or len(dims) != 1:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): mean over {dims}; memcal's mean takes one axis")
    ex.put(n, "mean", {"dim": int(dims[0]), "keepdim": bool(_arg(n, 2, "keepdim", False))}, [ex.id_of(n.args[0], n)])


def _softmax(ex, n):
    ex.put(n, "softmax", {"dim": int(n.args[1])}, [ex.id_of(n.args[0], n)])


def _cat(ex, n):
    parts = list(n.args[0])
    dim = int(_arg(n, 1, "dim", 0))
    if len(parts) == 2 and ex.kind(parts[0]) == "pconst" and ex.kind(parts[1]) == "value" and dim == 1:
        # torch.cat([cls_token.expand(B, -1, -1), x], 1): a learned class token (ViT).
        p = ex.params.get(ex.through_expand(parts[0]))
        if p is not None and p.dim() == 3 and p.shape[0] == 1 and p.shape[1] == 1:
            ex.put(n, "prepend_token", {"dim": int(p.shape[2])}, [ex.id_of(parts[1], n)], base=ex.base_id(n, "class_token"))
            return
    if any(ex.kind(p) != "value" for p in parts):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): concatenating a parameter or constant tensor")
    # Empty pieces (Phi-3's `q[..., rotary_dim:]` when the rotary covers the head) are skipped;
    # a cat of the one piece left is still a contiguous copy.
    parts = [p for p in parts if ex.resolve(p) not in ex.empty]
    ex.put(n, "concat", {"dim": dim}, [ex.id_of(p, n) for p in parts])


def _batched(shape, like):
    """A shape with its first axis `"B"` where it is the example batch of `like`'s first axis."""
    if shape and like and shape[0] == EXAMPLE_BATCH and like[0] == EXAMPLE_BATCH:
        return ["B"] + list(shape[1:])
    return list(shape)


def _expand(ex, n):
    x = n.args[0]
    out, shape = _shape(n), _shape(x)
    if len(out) != len(shape) or out[0] != shape[0]:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): an expand of {shape} to {out} (memcal expands axes of size 1, batch kept)")
    ex.put(n, "expand", {"shape": _batched(out, shape)}, [ex.id_of(x, n)])


def _sdpa_math(ex, n, ids, mask, causal, p=0.0, padded=None):
    """sdpa with one key/value head broadcast over the query heads (Falcon's multi-query
    attention), or with dropout `p`: torch's flash kernel takes equal head counts only and no
    dropout, so sdpa runs its math path (`_scaled_dot_product_attention_math`, attention.cpp),
    drawn op by op: q and k^T each times sqrt(scale), k and v expanded to the heads (matmul
    copies them), scores plus the mask (a constant: the model's boolean mask made additive on
    each call, reading `padded`, the shared one computed from a padding mask; or the causal one
    torch builds), softmax, dropout, @ v."""
    q, k, v = n.args[0], n.args[1], n.args[2]
    b, h, tq, d = _shape(q)
    tk = _shape(k)[2]
    root = float(_arg(n, 6, "scale", None) or d ** -0.5) ** 0.5
    base = ex.short(ex.innermost(n))
    name = (lambda op: f"{base}.{op}") if base else (lambda op: op)
    qs = ex.emit(name("q_scaled"), "unary", {"fn": "mul_scalar", "scalar": root}, [ids[0]])
    kt = ex.emit(name("k_t"), "permute", {"dims": [0, 1, 3, 2]}, [ids[1]])
    kts = ex.emit(name("k_scaled"), "unary", {"fn": "mul_scalar", "scalar": root}, [kt])
    ke = ex.emit(name("k_heads"), "expand", {"shape": ["B", h, d, tk]}, [kts])
    scores = ex.emit(name("scores"), "matmul", {}, [qs, ke])
    if mask is not None or causal:
        shape = _batched(_shape(mask), [b]) if mask is not None else [tq, tk]
        if padded is not None and _floating(ex.resolve(mask)):
            c = padded  # an additive mask, added as it is (no copy per call)
        else:
            c = ex.emit(name("mask"), "constant", {"shape": shape}, [padded or scores])
        scores = ex.emit(name("masked"), "add", {}, [scores, c])
    probs = ex.emit(name("probs"), "softmax", {"dim": -1}, [scores])
    if p:
        probs = ex.emit(name("probs_dropout"), "dropout", {"p": p}, [probs])
    ve = ex.emit(name("v_heads"), "expand", {"shape": ["B", h, tk, _shape(v)[3]]}, [ids[2]])
    ex.put(n, "matmul", {}, [probs, ve], base=name("context"))


def _sdpa(ex, n):
    """F.scaled_dot_product_attention of three values: memcal's sdpa (transformers' sdpa
    attention, written out op by op). A mask computed from an input (transformers' attention
    mask from a padding mask) is a constant read by every layer; with dropout, or one kv head
    broadcast, sdpa runs its math path, drawn op by op."""
    q, k, v = n.args[0], n.args[1], n.args[2]
    mask, p = _arg(n, 3, "attn_mask"), float(_arg(n, 4, "dropout_p", 0.0) or 0.0)
    causal, gqa = bool(_arg(n, 5, "is_causal", False)), bool(_arg(n, 7, "enable_gqa", False))
    if n in ex.gqa:
        (k, v), gqa = ex.gqa[n], True
    if any(ex.kind(t) != "value" for t in (q, k, v)):
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): attention of a parameter or constant tensor")
    ids = [ex.id_of(t, n) for t in (q, k, v)]
    if _is_node(mask) and ex.kind(mask) == "ivalue":
        padded = _constant(ex, n, mask, q, onto=_shape(q)[:3] + [_shape(k)[2]])
        if p or (not gqa and _shape(k)[1] == _shape(v)[1] == 1 < _shape(q)[1]):
            _sdpa_math(ex, n, ids, mask, False, p, padded)
            return
        ex.put(n, "sdpa", {"enable_gqa": True} if gqa else {}, ids + [padded])
        return
    if _is_node(mask):
        # Tracing builds transformers' causal mask from constants where an eager run without a
        # padding mask passes none and sets is_causal: read as the module's is_causal.
        m = ex.modules.get(ex.innermost(n))
        if ex.kind(mask) == "value" or getattr(m, "is_causal", None) is None:
            raise ExportError(
                f"aten node `{n.name}` ({ex.where(n)}): attention with a mask tensor; memcal's sdpa is causal or "
                "unmasked: export without attention_mask"
            )
        causal = bool(m.is_causal)
    if p:
        raise ExportError(f"aten node `{n.name}` ({ex.where(n)}): attention dropout {p} inside sdpa has no memcal attribute")
    attrs = {"causal": causal} if causal else {}
    if gqa:
        attrs["enable_gqa"] = True
    if not gqa and _shape(k)[1] == _shape(v)[1] == 1 < _shape(q)[1]:
        _sdpa_math(ex, n, ids, mask if _is_node(mask) else None, causal)
        return
    ex.put(n, "sdpa", attrs, ids)


ATEN = {
    "embedding": _embedding,
    "linear": _linear,
    "conv2d": _conv2d,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    "group_norm": _group_norm,
    "dropout": _dropout,
    "gelu": _gelu,
    "tanh": _tanh,
    "pow": _pow,
    "select": _select,
    "slice": _slice,
    "split": _split,
    "split_with_sizes": _split,
    "chunk": _split,
    "getitem": _getitem,
    "matmul": _matmul,
    "bmm": _matmul,
    "index": _index,
    "mean": _mean,
    "softmax": _softmax,
    "_softmax": _softmax,
    "cat": _cat,
    "expand": _expand,
    "scaled_dot_product_attention": _sdpa,
    "permute": _permute,
    "transpose": _permute,
    "t": _permute,
}
ATEN.update({k: _activation(v) for k, v in ACTIVATIONS.items()})
ATEN.update({k: _unary(k) for k in UNARY})
ATEN.update({k: _binary for k in BINARY})
ATEN.update({k: _reshape for k in RESHAPES})


def _repeat_kv_source(ex, t):
    """The [B, kv_heads, T, D] tensor that transformers' repeat_kv (`x[:, :, None]`, expand,
    reshape) repeats into `t`, with the nodes it adds, or None (then `t` is drawn as it is)."""
    chain, r = [], ex.resolve(t)
    for names in (("reshape", "view", "_unsafe_view"), ("expand",), ("unsqueeze",)):
        if r.op != "call_function" or _name(r.target) not in names or len(r.users) != 1:
            return None
        chain.append(r)
        r = ex.resolve(r.args[0])
    return (r, chain) if int(chain[-1].args[1]) == 2 else None


def _mark_repeat_kv(ex):
    """Tracing builds transformers' causal mask from constants, so the traced sdpa attention
    repeats K and V (repeat_kv); the eager run without a padding mask passes no mask and calls
    sdpa with enable_gqa instead (`use_gqa_in_sdpa`: head dims equal and at most 256). Those
    repeats are not drawn: the sdpa reads the kv heads with enable_gqa. With a mask computed from
    an input (a padding mask) the eager run repeats them too: they are drawn."""
    for n in ex.ep.graph.nodes:
        if n.op != "call_function" or _name(n.target) != "scaled_dot_product_attention":
            continue
        mask = _arg(n, 3, "attn_mask")
        if not _is_node(mask) or ex.kind(mask) in ("value", "ivalue") or bool(_arg(n, 7, "enable_gqa", False)):
            continue
        k, v = _repeat_kv_source(ex, n.args[1]), _repeat_kv_source(ex, n.args[2])
        if k is None or v is None or not (_shape(k[0])[-1] == _shape(v[0])[-1] <= 256):
            continue
        ex.gqa[n] = (k[0], v[0])
        ex.skipped.update(k[1] + v[1])


def _mark_tables(ex):
    """Embeddings of constant indices (position ids, a token-type buffer) are tables, read by
    the op that adds them."""
    for n in ex.ep.graph.nodes:
        if n.op == "call_function" and _name(n.target) == "embedding" and ex.kinds.get(n) == "pconst":
            if ex.kind(n.args[1]) == "const" and ex.resolve(n.args[0]) in ex.params:
                ex.tables[n] = ex.resolve(n.args[0])


def _pick(out, output):
    if output is not None:
        return out[output] if isinstance(out, dict) else getattr(out, output)
    if hasattr(out, "shape"):
        return out
    for field in ("logits", "pooler_output", "last_hidden_state"):
        v = getattr(out, field, None)
        if v is not None:
            return v
    if isinstance(out, (tuple, list)):
        return out[0]
    raise ExportError(f"the forward returns a {type(out).__name__}; name its tensor with output=")


@functools.lru_cache(maxsize=None)
def _wrapper_class():
    import torch.nn as nn

    class Call(nn.Module):
        """Calls the model with its inputs by name (and the fixed keyword arguments), and returns
        the one tensor the loss reads."""

        def __init__(self, model, names, kwargs, output):
            super().__init__()
            self.model = model
            self.names, self.kw, self.out = names, kwargs, output

        def forward(self, *xs):
            if self.names is None:  # the forward's arguments in order
                return _pick(self.model(*xs, **self.kw), self.out)
            return _pick(self.model(**dict(zip(self.names, xs)), **self.kw), self.out)

    return Call


def default_kwargs(module):
    """transformers' generation cache is off in training; pass use_cache=False where the forward
    takes it."""
    import inspect

    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"use_cache": False} if "use_cache" in params else {}


def _IndexLists():
    """A torch function mode that records the Python lists a model indexes tensors with
    (`x[..., [-2], :]`): torch.export lifts each into a constant tensor, which on the meta device
    holds no values. `by_constant(ep)` maps each lifted constant to its list, by order of
    creation, or returns None when the counts differ (then the values stay unknown)."""
    import re

    import torch
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__getitem__ and len(args) > 1:
                index = args[1] if isinstance(args[1], tuple) else (args[1],)
                self.seen.extend(list(i) for i in index if isinstance(i, list) and all(isinstance(v, int) for v in i))
            return func(*args, **(kwargs or {}))

        def by_constant(self, ep):
            lifted = sorted((int(m.group(1)), k) for k in ep.constants if (m := re.search(r"lifted_tensor_(\d+)$", k)))
            if len(lifted) != len(self.seen):
                return None
            return {k: v for (_, k), v in zip(lifted, self.seen)}

    return Mode()


def trace(module, inputs, kwargs=None, output=None, positional=False):
    """Runs torch.export on the meta device; returns (nodes, output id, output shape, extra
    inputs, notes: what the model computes that the graph does not draw or approximates,
    elements of the parameters no op holds). `positional`: the inputs are the forward's
    arguments in order (a module the fx route refused), not its keyword arguments."""
    import torch

    names = [i[0] for i in inputs]
    kwargs = default_kwargs(module) if kwargs is None else kwargs

    def examples(batch):
        out = []
        for _, shape, dtype in inputs:
            dims = [batch if d == "B" else int(d) for d in shape]
            dt = torch.int64 if isinstance(dtype, tuple) else torch.float32
            out.append(torch.zeros(dims, dtype=dt, device="meta"))
        return tuple(out)

    was_training = module.training
    module.train()  # the training step is what memcal plans: dropout on, batch statistics
    root = _wrapper_class()(module, None if positional else names, kwargs, output)

    def export_at(batch):
        """The program traced at another batch (generic nodes' shapes in B)."""
        try:
            return torch.export.export(root, examples(batch), strict=False)
        except Exception as e:
            raise ExportError(f"torch.export could not trace {type(module).__name__} at batch {batch}: {type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e

    try:
        lists = _IndexLists()
        try:
            with lists:
                ep = torch.export.export(root, examples(EXAMPLE_BATCH), strict=False)
        except Exception as e:  # torch.export's own errors name the line of model code that failed
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ExportError(f"torch.export could not trace {type(module).__name__}: {type(e).__name__}: {first}") from e
        twin, declined = generic.Twin(export_at), set()
        while True:
            ex = _Program(ep, root, names, lists.by_constant(ep), twin, declined)
            try:
                ex.run()
                break
            except _Decline as d:
                declined.add(d.key)
    finally:
        module.train(was_training)
    ex.notes.extend(_call_scope_notes(module))
    return ex.nodes, ex.ids[ex.output], _shape(ex.output), ex.extra_inputs, _collapse(ex.notes), ex.undrawn


def _call_scope_notes(module):
    """torch's nn.TransformerEncoder and nn.TransformerDecoder keep their arguments (`src`;
    `tgt` and `memory`) bound in their forward's frame until it returns, where memcal frees a
    value after its last reader: a module call's scope is not in the graph. Measured on a
    2-layer decoder: its real forward peaks 113,820 bytes (1.07%) above the graph's."""
    import torch.nn as nn

    kept = {nn.TransformerEncoder: "`src`", nn.TransformerDecoder: "`tgt` and `memory`"}
    notes = []
    for path, m in module.named_modules():
        args = kept.get(type(m))
        if args:
            notes.append(f"`{path or type(m).__name__}` (torch's {type(m).__name__}) holds {args} until it returns; "
                         "memcal frees each after its last reader (a module call's scope is not drawn), so the "
                         "forward peak may be low by their size")
    return notes


def _collapse(notes):
    """One note per repeated block: `layers.0.x` and `layers.1.x` are `layers.*.x (2 places)`."""
    import re

    order, counts = [], {}
    for note in notes:
        key = re.sub(r"(?<=\.)\d+(?=\.)", "*", note) if "`" in note else note
        if key not in counts:
            order.append(key)
        counts[key] = counts.get(key, 0) + 1
    return [k if counts[k] == 1 else f"{k} ({counts[k]} places)" for k in order]
