"""Traces a torch module on the meta device (torch.fx: no weights, no memory) and writes a
`memcal-graph/1` graph (docs/graph-format.md): known modules map onto memcal's ops, elementwise
functions onto its generic ops (`unary`, `add`, `mul`, ...), and anything else is refused with
the node, its module and what to do.

One table, `MODULES`, says how each known module class is drawn; `FUNCTIONS` does the same for
functions and tensor methods. Adding a mapping touches one of them.
"""

import contextlib
import functools
import json
import warnings

from .nodes import ExportError, add_node, fresh_id, torch_mha_attrs  # noqa: F401 (re-exported)

FORMAT = "memcal-graph/1"


def build_on_meta(factory):
    """Calls `factory()` with no weights allocated: under `torch.device("meta")`, or, where the
    module's own code reads a tensor's values while it is built (torchvision's RegNet computes its
    block widths with `torch.pow(...).tolist()`: "Cannot copy out of meta tensor"), with only its
    parameters and buffers put on the meta device as each is registered and every other tensor
    on the CPU (accelerate's `init_empty_weights` reading). Either way no weight is kept in
    memory: each parameter is made on the CPU, then replaced by its meta twin."""
    import torch

    try:
        with torch.device("meta"):
            return factory()
    except (NotImplementedError, RuntimeError) as e:
        if "meta" not in str(e):
            raise
    with _meta_parameters():
        return factory()


@contextlib.contextmanager
def _meta_parameters():
    import torch

    module = torch.nn.Module
    register_parameter, register_buffer = module.register_parameter, module.register_buffer

    def parameter(self, name, param):
        register_parameter(self, name, param)
        p = self._parameters.get(name)
        if p is not None and p.device.type != "meta":
            self._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    def buffer(self, name, tensor, persistent=True):
        register_buffer(self, name, tensor, persistent)
        b = self._buffers.get(name)
        if b is not None and b.device.type != "meta":
            self._buffers[name] = b.to("meta")

    module.register_parameter, module.register_buffer = parameter, buffer
    try:
        yield
    finally:
        module.register_parameter, module.register_buffer = register_parameter, register_buffer


def _ints(t):
    return [int(d) for d in t]


def _square(v, what, node):
    if isinstance(v, (tuple, list)):
        if len(set(v)) != 1:
            raise ExportError(f"node `{node}`: {what} {tuple(v)} is not square; memcal's conv and pool ops take one size")
        return int(v[0])
    return int(v)


# --- known modules -------------------------------------------------------------------------------


def _linear(m, ctx):
    return "linear", {"in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None}


def _conv(m, ctx):
    nd = len(m.kernel_size)
    if nd not in (1, 2):
        raise ExportError(f"node `{ctx.name}`: conv{nd}d has no memcal op (conv1d and conv2d do)")
    if _square(m.dilation, "dilation", ctx.name) != 1:
        raise ExportError(f"node `{ctx.name}`: dilation != 1 has no memcal attribute")
    if isinstance(m.padding, str):
        raise ExportError(f"node `{ctx.name}`: padding `{m.padding}`: give it as a number")
    return f"conv{nd}d", {
        "in_channels": m.in_channels,
        "out_channels": m.out_channels,
        "kernel_size": _square(m.kernel_size, "kernel_size", ctx.name),
        "stride": _square(m.stride, "stride", ctx.name),
        "padding": _square(m.padding, "padding", ctx.name),
        "groups": m.groups,
        "bias": m.bias is not None,
    }


def _batch_norm(m, ctx):
    if not m.affine or not m.track_running_stats:
        raise ExportError(f"node `{ctx.name}`: batch norm without affine weights or running statistics has no memcal op")
    return "batch_norm", {"num_features": m.num_features}


def _layer_norm(m, ctx):
    if len(m.normalized_shape) != 1 or not m.elementwise_affine:
        raise ExportError(f"node `{ctx.name}`: layer norm over {tuple(m.normalized_shape)} (memcal's normalizes the last axis, with weights)")
    return "layer_norm", {"normalized_shape": int(m.normalized_shape[0]), "bias": m.bias is not None}


def _rms_norm(m, ctx):
    w = getattr(m, "weight", None)
    if w is None or w.dim() != 1:
        raise ExportError(f"node `{ctx.name}`: an RMS norm without a 1-d weight")
    return "rms_norm", {"dim": int(w.shape[0])}


def _group_norm(m, ctx):
    return "group_norm", {"num_groups": m.num_groups, "num_channels": m.num_channels}


def _gelu(m, ctx):
    return "gelu", ({"approximate": "tanh"} if m.approximate == "tanh" else {})


def _dropout(m, ctx):
    # torch returns its input untouched for p = 0 (no mask, nothing saved).
    return (None, None) if m.p == 0 else ("dropout", {"p": float(m.p)})


def _pool(kind):
    def draw(m, ctx):
        attrs = {"kernel_size": _square(m.kernel_size, "kernel_size", ctx.name)}
        attrs["stride"] = _square(m.stride if m.stride is not None else m.kernel_size, "stride", ctx.name)
        attrs["padding"] = _square(m.padding, "padding", ctx.name)
        if kind == "max_pool" and _square(m.dilation, "dilation", ctx.name) != 1:
            raise ExportError(f"node `{ctx.name}`: max pool with dilation has no memcal attribute")
        if getattr(m, "ceil_mode", False):
            # A larger output than memcal's pool ops compute (GoogLeNet): the torch.export route
            # draws the ATen call itself.
            raise ExportError(f"node `{ctx.name}`: a pool with ceil_mode has no memcal attribute")
        return kind, attrs

    return draw


def _adaptive(m, ctx):
    return "adaptive_avg_pool", {"output_size": _square(m.output_size, "output_size", ctx.name)}


def _flatten(m, ctx):
    return "flatten", {"start_dim": m.start_dim, "end_dim": m.end_dim}


def _embedding(m, ctx):
    return "embedding", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim}


def _softmax(m, ctx):
    return "softmax", {"dim": m.dim}


def _mha(m, ctx):
    if ctx.kwargs.get("attn_mask") is not None or ctx.kwargs.get("key_padding_mask") is not None:
        raise ExportError(f"node `{ctx.name}`: attention masks have no memcal attribute yet (is_causal does)")
    args = ctx.tensor_args
    cross = len(args) >= 2 and not (args[0] is args[1] and (len(args) < 3 or args[1] is args[2]))
    attrs = torch_mha_attrs(m, f"node `{ctx.name}`", cross=cross, sdpa=not ctx.kwargs.get("need_weights", True),
                            causal=ctx.kwargs.get("is_causal", False), dropout=m.dropout)
    if cross and len(args) >= 3 and args[1] is not args[2]:
        raise ExportError(f"node `{ctx.name}`: attention with different key and value inputs")
    ctx.inputs_override = args[:2] if cross else args[:1]
    ctx.tuple_output = True
    if "impl" not in attrs:
        ctx.notes.append(f"`{ctx.name}`: nn.MultiheadAttention's eager path (need_weights=True) is drawn with "
                         "memcal's eager attention rule, whose saved tensors are not those of torch's own code "
                         "(measured: +4.61% on a cross-attention case)")
    return "multihead_attention", attrs


def _recurrent(kind):
    def draw(m, ctx):
        if not m.batch_first:
            raise ExportError(f"node `{ctx.name}`: {kind} needs batch_first=True")
        ctx.tuple_output = True
        return kind, {
            "input_size": m.input_size,
            "hidden_size": m.hidden_size,
            "num_layers": m.num_layers,
            "bidirectional": m.bidirectional,
        }

    return draw


def _identity(m, ctx):
    return None, None


def _simple(op):
    return lambda m, ctx: (op, {})


def _unary_module(fn):
    return lambda m, ctx: ("unary", {"fn": fn})


@functools.lru_cache(maxsize=None)
def _modules():
    import torch.nn as nn

    table = [
        (nn.Linear, _linear),
        (nn.Conv1d, _conv),
        (nn.Conv2d, _conv),
        (nn.BatchNorm1d, _batch_norm),
        (nn.BatchNorm2d, _batch_norm),
        (nn.LayerNorm, _layer_norm),
        (nn.GroupNorm, _group_norm),
        (nn.ReLU, _simple("relu")),
        (nn.GELU, _gelu),
        (nn.SiLU, _simple("silu")),
        (nn.Tanh, _simple("tanh")),
        (nn.Sigmoid, _unary_module("sigmoid")),
        (nn.Dropout, _dropout),
        (nn.MaxPool1d, _pool("max_pool")),
        (nn.MaxPool2d, _pool("max_pool")),
        (nn.AvgPool1d, _pool("avg_pool")),
        (nn.AvgPool2d, _pool("avg_pool")),
        (nn.AdaptiveAvgPool1d, _adaptive),
        (nn.AdaptiveAvgPool2d, _adaptive),
        (nn.Flatten, _flatten),
        (nn.Embedding, _embedding),
        (nn.Softmax, _softmax),
        (nn.MultiheadAttention, _mha),
        (nn.LSTM, _recurrent("lstm")),
        (nn.GRU, _recurrent("gru")),
        (nn.Identity, _identity),
    ]
    if hasattr(nn, "RMSNorm"):
        table.append((nn.RMSNorm, _rms_norm))
    return tuple(table)


def _module_rule(m):
    for cls, draw in _modules():
        if type(m) is cls:
            return draw
    # Model code's own RMS norms (transformers' LlamaRMSNorm and its copies).
    if type(m).__name__.endswith("RMSNorm"):
        return _rms_norm
    return None


# --- functions and methods -----------------------------------------------------------------------

UNARY = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sigmoid": "sigmoid",
    "neg": "neg", "abs": "abs", "sin": "sin", "cos": "cos", "erf": "erf", "reciprocal": "reciprocal",
}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "tanh": "tanh"}
BINARY = {"add": "add", "mul": "mul", "sub": "sub", "truediv": "div", "div": "div"}


def _fn_name(target):
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", str(target))
    return name


class _Ctx:
    def __init__(self, name, tensor_args, kwargs):
        self.name = name
        self.tensor_args = tensor_args
        self.kwargs = kwargs
        self.inputs_override = None
        self.tuple_output = False
        self.notes = []  # approximations the drawing makes, written into the graph


class _Exporter:
    def __init__(self, gm, example_batch):
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.example_batch = example_batch
        self.nodes = []
        self.ids = {}  # fx node -> memcal value id (None: not a tensor we draw)
        self.alias = {}  # fx node -> fx node it passes through
        self.params = {}  # fx get_attr node -> the tensor
        self.tuples = set()  # fx nodes whose value is a tuple whose [0] is the tensor
        self.used_ids = set()
        self.input_names = []
        self.placeholders = 0
        self.notes = []

    def shape(self, n):
        tm = n.meta.get("tensor_meta")
        if tm is None or not hasattr(tm, "shape"):
            return None
        return _ints(tm.shape)

    def resolve(self, n):
        while n in self.alias:
            n = self.alias[n]
        return n

    def value(self, n):
        import torch.fx as fx

        if not isinstance(n, fx.Node):
            return None
        return self.ids.get(self.resolve(n))

    def emit(self, n, op, attrs, inputs):
        node_id = add_node(self.nodes, self.used_ids, str(n.target) if n.op == "call_module" else n.name, op, attrs, inputs)
        self.ids[n] = node_id
        return node_id

    def run(self):
        for n in self.gm.graph.nodes:
            self.node(n)

    def node(self, n):
        if n.op == "placeholder":
            # The forward's arguments, in order, are the inputs the caller named.
            if self.placeholders >= len(self.input_names):
                raise ExportError(f"the forward takes an argument `{n.target}` beyond the {len(self.input_names)} inputs given")
            self.ids[n] = self.input_names[self.placeholders]
            self.placeholders += 1
        elif n.op == "get_attr":
            self.params[n] = _attr(self.gm, n.target)
        elif n.op == "call_module":
            self.call_module(n)
        elif n.op in ("call_function", "call_method"):
            self.call_function(n)
        elif n.op == "output":
            out = n.args[0]
            if isinstance(out, (tuple, list)):
                out = out[0]
            if isinstance(out, dict):
                out = next(iter(out.values()))
            self.output = self.resolve(out)

    def tensor_inputs(self, n):
        import torch.fx as fx

        return [a for a in n.args if isinstance(a, fx.Node)]

    def call_module(self, n):
        m = self.modules[n.target]
        draw = _module_rule(m)
        if draw is None:
            raise ExportError(
                f"node `{n.target}`: module {type(m).__module__}.{type(m).__name__} has no memcal op; "
                "trace through it (pass it to export's `leaf_modules` only if memcal has an op for it) "
                "or write it with ops memcal knows (docs/graph-format.md)"
            )
        ctx = _Ctx(n.target, self.tensor_inputs(n), dict(n.kwargs))
        op, attrs = draw(m, ctx)
        self.notes.extend(ctx.notes)
        srcs = ctx.inputs_override or ctx.tensor_args[:1]
        if op is None:
            self.alias[n] = srcs[0]
            return
        inputs = [self.value(s) for s in srcs]
        if any(i is None for i in inputs):
            raise ExportError(f"node `{n.target}`: an input is not a tensor memcal drew")
        self.emit(n, op, attrs, inputs)
        if ctx.tuple_output:
            self.tuples.add(n)

    def call_function(self, n):
        name = _fn_name(n.target)
        args = list(n.args)
        flat = [b for a in args for b in (a if isinstance(a, (list, tuple)) else [a])]
        tensors = [a for a in flat if self.value(a) is not None]
        if name == "getitem":
            self.getitem(n, args)
            return
        if not tensors and not any(self.resolve(a) in self.params for a in flat if hasattr(a, "op")):
            return  # shape arithmetic (size, dim, floordiv, _assert...): nothing to draw
        if name in ("size", "dim", "_assert", "eq", "getattr"):
            return
        x = tensors[0] if tensors else None
        if name in BINARY or name in ("iadd", "imul"):
            self.binary(n, BINARY.get(name, name[1:]), args)
        elif name in UNARY:
            self.emit(n, "unary", {"fn": UNARY[name]}, [self.value(x)])
        elif name in ACTIVATIONS:
            attrs = {}
            if name == "gelu" and n.kwargs.get("approximate", "none") == "tanh":
                attrs["approximate"] = "tanh"
            self.emit(n, ACTIVATIONS[name], attrs, [self.value(x)])
        elif name == "dropout":
            p = n.kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = n.kwargs.get("training", args[2] if len(args) > 2 else True)
            if p == 0 or not training:
                self.alias[n] = x
            else:
                self.emit(n, "dropout", {"p": float(p)}, [self.value(x)])
        elif name == "pow":
            e = args[1] if len(args) > 1 else n.kwargs.get("exponent")
            self.emit(n, "unary", {"fn": "pow", "exponent": float(e)}, [self.value(x)])
        elif name in ("flatten",):
            start = args[1] if len(args) > 1 else n.kwargs.get("start_dim", 0)
            end = args[2] if len(args) > 2 else n.kwargs.get("end_dim", -1)
            self.emit(n, "flatten", {"start_dim": start, "end_dim": end}, [self.value(x)])
        elif name in ("permute", "transpose"):
            self.permute(n, name, x, args)
        elif name in ("reshape", "view"):
            self.reshape(n, x)
        elif name == "contiguous":
            self.alias[n] = x
        elif name == "mean":
            dim = args[1] if len(args) > 1 else n.kwargs.get("dim")
            if isinstance(dim, (list, tuple)):
                if len(dim) != 1:
                    raise ExportError(f"node `{n.name}`: mean over several axes; memcal's mean takes one")
                dim = dim[0]
            self.emit(n, "mean", {"dim": int(dim), "keepdim": bool(n.kwargs.get("keepdim", False))}, [self.value(x)])
        elif name == "softmax":
            dim = args[1] if len(args) > 1 else n.kwargs.get("dim")
            self.emit(n, "softmax", {"dim": int(dim)}, [self.value(x)])
        elif name == "cat":
            self.cat(n, args)
        elif name == "expand":
            self.expand(n, args)
        else:
            raise ExportError(
                f"node `{n.name}`: `{name}` has no memcal op; write it with ops memcal knows "
                "(docs/graph-format.md lists them) or open an issue naming this function"
            )

    def binary(self, n, op, args):
        a, b = args[0], args[1]
        va, vb = self.value(a), self.value(b)
        pa = self.params.get(self.resolve(a)) if hasattr(a, "op") else None
        pb = self.params.get(self.resolve(b)) if hasattr(b, "op") else None
        if va is not None and vb is not None:
            if self.shape(a) != self.shape(b):
                raise ExportError(
                    f"node `{n.name}`: `{op}` of shapes {self.shape(a)} and {self.shape(b)}: memcal's "
                    "elementwise ops take equal shapes (broadcasting is not drawn)"
                )
            self.emit(n, op, {}, [va, vb])
        elif va is not None and pb is not None or vb is not None and pa is not None:
            x, p = (a, pb) if va is not None else (b, pa)
            shp = self.shape(x)
            if op == "add" and p.dim() == 3 and p.shape[0] == 1 and list(p.shape[1:]) == shp[1:]:
                # A learned table added to every sequence: a position embedding.
                self.emit(n, "learned_position", {"num_positions": int(p.shape[1]), "dim": int(p.shape[2])}, [self.value(x)])
            else:
                raise ExportError(f"node `{n.name}`: `{op}` with a parameter tensor of shape {tuple(p.shape)}")
        elif va is not None or vb is not None:
            x, s = (a, b) if va is not None else (b, a)
            if not isinstance(s, (int, float)):
                raise ExportError(f"node `{n.name}`: `{op}` with {type(s).__name__}")
            if op == "add":
                self.emit(n, "unary", {"fn": "add_scalar", "scalar": float(s)}, [self.value(x)])
            elif op == "mul":
                self.emit(n, "unary", {"fn": "mul_scalar", "scalar": float(s)}, [self.value(x)])
            elif op == "sub" and va is not None:
                self.emit(n, "unary", {"fn": "add_scalar", "scalar": -float(s)}, [self.value(x)])
            elif op == "div" and va is not None:
                self.emit(n, "unary", {"fn": "mul_scalar", "scalar": 1.0 / float(s)}, [self.value(x)])
            else:
                raise ExportError(f"node `{n.name}`: a scalar {op} a tensor")

    def getitem(self, n, args):
        src, idx = args[0], args[1]
        src_r = self.resolve(src)
        if src_r in self.tuples and idx == 0:
            self.alias[n] = src_r
            return
        if src_r in self.tuples:
            return  # a recurrent layer's state or attention weights nobody reads as a tensor
        if self.value(src) is None:
            return
        # x[:, i]: one token of a [B, T, d] sequence.
        if (
            isinstance(idx, tuple)
            and len(idx) == 2
            and idx[0] == slice(None)
            and isinstance(idx[1], int)
            and len(self.shape(src)) == 3
        ):
            self.emit(n, "select_token", {"index": idx[1]}, [self.value(src)])
            return
        raise ExportError(f"node `{n.name}`: indexing with {idx!r} has no memcal op (x[:, i] on [B, T, d] does)")

    def permute(self, n, name, x, args):
        rank = len(self.shape(x))
        if name == "transpose":
            a, b = args[1] % rank, args[2] % rank
            dims = list(range(rank))
            dims[a], dims[b] = dims[b], dims[a]
        else:
            dims = args[1:] if not isinstance(args[1], (list, tuple)) else list(args[1])
            dims = [int(d) % rank for d in dims]
        self.emit(n, "permute", {"dims": dims}, [self.value(x)])

    def reshape(self, n, x):
        out = self.shape(n)
        if out[0] != self.example_batch:
            raise ExportError(f"node `{n.name}`: a reshape that moves the batch axis ({out})")
        self.emit(n, "reshape", {"shape": ["B"] + out[1:]}, [self.value(x)])

    def expand(self, n, args):
        """`latents.expand(B, ...)` of a free learned tensor (a Perceiver's latent array) is the
        `parameter` op, broadcast over the batch of the first input; a class token's broadcast
        is drawn by the `cat` that reads it."""
        p = self.params.get(self.resolve(args[0])) if hasattr(args[0], "op") else None
        out = self.shape(n)
        if p is not None and out is not None and len(out) == p.dim() + 1 and out[0] == self.example_batch \
                and list(out[1:]) == [int(d) for d in p.shape]:
            self.emit(n, "parameter", {"shape": [int(d) for d in p.shape]}, [self.input_names[0]])
            return
        self.alias[n] = args[0]

    def cat(self, n, args):
        parts = list(args[0])
        dim = args[1] if len(args) > 1 else n.kwargs.get("dim", 0)
        params = [self.params.get(self.resolve(p)) for p in parts]
        if len(parts) == 2 and params[0] is not None and self.value(parts[1]) is not None:
            tok = params[0]
            if dim == 1 and tok.dim() == 3 and tok.shape[0] == 1 and tok.shape[1] == 1:
                self.emit(n, "prepend_token", {"dim": int(tok.shape[2])}, [self.value(parts[1])])
                return
        vals = [self.value(p) for p in parts]
        if any(v is None for v in vals):
            raise ExportError(f"node `{n.name}`: concatenating a parameter tensor (memcal draws only a class token prepended on dim 1)")
        self.emit(n, "concat", {"dim": int(dim)}, vals)


def _attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _is_transformers(module):
    return any(c.__name__ == "PreTrainedModel" for c in type(module).__mro__)


def _needs_export(module):
    """transformers models, and modules holding torch's own transformer layers (whose forward
    branches on its tensors' properties, which torch.fx cannot trace), go through torch.export."""
    import torch.nn as nn

    layers = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
    return _is_transformers(module) or any(isinstance(m, layers) for m in module.modules())


def export(
    module,
    inputs,
    *,
    name,
    family,
    loss="cross_entropy",
    classes=None,
    description="",
    leaf_modules=(),
    tracer="auto",
    kwargs=None,
    output=None,
):
    """Traces `module` and returns the graph as a dict.

    `inputs`: a list of (name, shape, dtype) with shape entries "B" or ints and dtype
    "float32" or ("int64", classes). `loss`: "cross_entropy" (labels [B] or [B, T] int64 with
    `classes`, added as an input `labels`) or "mse" (a target input of the output's shape).
    `tracer`: "fx" (torch.fx; the inputs are the forward's arguments in order), "export"
    (torch.export, `program.py`: the inputs are passed by name, with `kwargs`, and `output`
    names the field of the result the loss reads) or "auto" (export for transformers models and
    modules with torch's nn.TransformerEncoderLayer or DecoderLayer, fx otherwise)."""
    from . import program

    undrawn, positional = 0, False
    how = None
    if tracer == "auto":
        tracer = "export" if _needs_export(module) else "fx"
        if tracer == "fx":
            try:
                nodes, out_id, out_shape, notes = _trace_fx(module, inputs, leaf_modules)
                extra, how = [], "torch.fx"
            except Exception as e:  # noqa: BLE001 - what fx cannot draw, torch.export may
                # A function or module no memcal op stands for (or code fx cannot trace): the
                # torch.export route draws it (generic `aten` nodes), the inputs in order.
                fx_error, tracer, positional = e, "export", True
    if tracer == "export":
        try:
            nodes, out_id, out_shape, extra, notes, undrawn = program.trace(
                module, inputs, kwargs=kwargs, output=output, positional=positional)
        except ExportError as e:
            if positional:
                raise ExportError(f"{e} (torch.fx refused it first: {fx_error})") from e
            raise
        how = "torch.export"
    elif tracer == "fx":
        if how is None:
            nodes, out_id, out_shape, notes = _trace_fx(module, inputs, leaf_modules)
            extra, how = [], "torch.fx"
    else:
        raise ExportError(f"tracer `{tracer}`: use fx, export or auto")
    if not description:
        description = f"{type(module).__name__}, exported by memcal_export ({how} on the meta device)"
        if notes:
            description += ". Not drawn or approximated (what the plan leaves out or counts otherwise): " + "; ".join(notes)
    for note in notes:
        warnings.warn(f"memcal_export: {note}", stacklevel=2)
    graph = _graph(nodes, out_id, out_shape, inputs, extra, loss=loss, classes=classes, name=name, family=family,
                   description=description)
    if notes:
        # Written into the graph, so `memcal plan` prints them first, in --json and on the page
        # (the graph is an "approximate graph"), not only as a Python warning.
        graph["notes"] = [{"text": note} for note in notes]
    _check_parameters(module, graph, undrawn)
    return graph


def _check_parameters(module, graph, undrawn):
    """memcal's count of the graph's parameters is the module's (each shared parameter once),
    less those a note names as held by no op."""
    from .generic import graph_parameters

    want = parameters(module) - undrawn
    got = graph_parameters(graph)
    if got != want:
        raise ExportError(
            f"the graph holds {got:,} parameters where {type(module).__name__} has {want:,}"
            + (f" (less {undrawn:,} that no op holds, noted)" if undrawn else "")
            + ": an op is drawn with parameters it does not have, or a parameter is counted twice"
        )


def _trace_fx(module, inputs, leaf_modules):
    import torch
    import torch.fx as fx
    from torch.fx.passes.shape_prop import ShapeProp

    leaves = tuple({cls for cls, _ in _modules()} | set(leaf_modules))

    class Tracer(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, leaves) or _module_rule(m) is not None or super().is_leaf_module(m, qualname)

    example_batch = 2
    graph = Tracer().trace(module)
    gm = fx.GraphModule(module, graph)
    examples = []
    for _, shape, dtype in inputs:
        dims = [example_batch if d == "B" else int(d) for d in shape]
        if isinstance(dtype, tuple):
            examples.append(torch.zeros(dims, dtype=torch.int64, device="meta"))
        else:
            examples.append(torch.zeros(dims, dtype=torch.float32, device="meta"))
    ShapeProp(gm).propagate(*examples)

    ex = _Exporter(gm, example_batch)
    ex.input_names = [i[0] for i in inputs]
    ex.used_ids.update(ex.input_names)
    ex.run()
    return ex.nodes, ex.value(ex.output), ex.shape(ex.output), ex.notes


def _graph(nodes, out_id, out_shape, inputs, extra, *, loss, classes, name, family, description):
    """The graph document: the inputs given, those the trace added (constant ids drawn as
    inputs), the loss over the output."""
    nodes = list(nodes)
    graph_inputs = []
    for iname, shape, dtype in inputs:
        entry = {"name": iname, "shape": list(shape), "dtype": dtype[0] if isinstance(dtype, tuple) else dtype}
        if isinstance(dtype, tuple):
            entry["classes"] = int(dtype[1])
        graph_inputs.append(entry)
    graph_inputs.extend(extra)
    if loss == "cross_entropy":
        if classes is None:
            classes = out_shape[-1]
        label_shape = ["B"] + out_shape[1:-1]
        graph_inputs.append({"name": "labels", "shape": label_shape, "dtype": "int64", "classes": int(classes)})
        nodes.append({"id": "loss", "op": "cross_entropy", "inputs": [out_id, "labels"]})
    elif loss == "mse":
        graph_inputs.append({"name": "target", "shape": ["B"] + out_shape[1:], "dtype": "float32"})
        nodes.append({"id": "loss", "op": "mse", "inputs": [out_id, "target"]})
    else:
        raise ExportError(f"loss `{loss}`: memcal knows cross_entropy and mse")
    return {
        "format": FORMAT,
        "name": name,
        "family": family,
        "variant": "exported",
        "cut_from": None,
        "description": description,
        "inputs": graph_inputs,
        "buffers": [],
        "nodes": nodes,
        "loss": "loss",
    }


def write(graph, path):
    with open(path, "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")


def parameters(module):
    return sum(p.numel() for p in module.parameters())


__all__ = ["export", "write", "ExportError", "parameters"]
