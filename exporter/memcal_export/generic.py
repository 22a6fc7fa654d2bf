"""The generic `aten` node (docs/graph-format.md, "The generic `aten` node"): every aten op of the
torch.export route (`program.py`) that no memcal op stands for is drawn as what torch records,
one ATen call: its target, its arguments in schema order (a tensor as `{"input": k}`, the node's
k-th input, or `{"param": k}`, a parameter named by its name in the module, so that a module
called twice shares it), its output's shape, dtype and contiguity, and the module it runs in.

- Shapes in B. The program is traced at batch 3 (`program.EXAMPLE_BATCH`); the first generic node
  traces it again at batch 5 (`Twin`), matched node by node by name (one code path, the same
  names), and each size is solved as c x B^k from its two values (`"B"`, `"64*B"`, `"B*B"`). A
  program that differs at batch 5 (its code depends on the batch size) is refused there. An int
  argument that differs between the two traces follows the batch; the generic node's arguments
  are literal, so it is written -1 where torch allows (one size of a view or reshape; an expand
  of an axis that keeps its size), an expand of a size-1 axis over the batch is memcal's
  `expand` (or `parameter`, for a parameter), and anywhere else it is refused, naming the op.
- CompositeImplicitAutograd ops (`aten.dropout`, `aten.pad`, `aten.adaptive_avg_pool2d`...) are
  never recorded by eager autograd, which runs their decomposition: they are drawn as that
  decomposition, traced with make_fx on fake CPU tensors below autograd (requires_grad as in the
  model), op by op (the graph notes it: on another device an op may decompose otherwise).
- What a generic op reads that the program does not draw: a parameter (its `params`); a value
  computed from parameters alone (`pconst`: a layer-scale view, an expanded token) drawn op by
  op, so gradients reach the parameters; a float32 or bool tensor of constants (`const`) or of
  an int64 input alone (`ivalue`: a padding mask) as memcal's `constant` (one node per tensor,
  as program.py draws them), other ones (ids computed from the input ids) op by op; a buffer
  as a `constant` (or `aten.zeros` of its dtype) made in each forward, where torch keeps it
  for the model's life (noted). A `contiguous` or `clone` of a non-contiguous tensor, which
  program.py reads through, is drawn where a generic op reads it (a view needs the copy).
- An op with several returns: each return read later is its own node of the same call, with
  `outputs` and `item` (noted when more than one is: the op's memory is then counted once per
  node).
"""

import math
import operator

from .nodes import ExportError

OTHER_BATCH = 5
# JSON has no infinity: an infinite argument (a mask's fill) is written as float32's largest
# finite value (a larger one overflows torch's conversion of the scalar), noted.
BIG = 3.4028234663852886e38
# Ops whose `size` argument may give the batch axis as -1.
SIZED_VIEWS = {"view.default", "_unsafe_view.default", "reshape.default", "view_copy.default"}
# Ops of a decomposition that return their input as it is (autograd's saved-tensor detaches).
PASS_THROUGH = {"detach.default", "alias.default", "lift_fresh.default"}


def _is_node(x):
    return hasattr(x, "op") and hasattr(x, "meta")


def _tensor(v):
    import torch

    return isinstance(v, torch.Tensor)


def dtype_name(dt, where):
    import torch

    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
             torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.int8: "int8",
             torch.uint8: "uint8", torch.bool: "bool"}
    if dt not in names:
        raise ExportError(f"{where}: a {dt} tensor; the graph format's dtypes are {', '.join(names.values())}")
    return names[dt]


def composite(target):
    """Whether an aten overload is CompositeImplicitAutograd: eager autograd runs its
    decomposition and never records it."""
    import torch

    return isinstance(target, torch._ops.OpOverload) and \
        torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd")


def batch_expr(a, b, where, batches=(3, OTHER_BATCH)):
    """One size from its values at the two example batches: an int, or c x B^k written in B."""
    a, b = int(a), int(b)
    if a == b:
        return a
    x, y = batches
    for k in (1, 2, 3):
        c, r = divmod(a, x ** k)
        if r == 0 and c > 0 and c * y ** k == b:
            return "*".join(([str(c)] if c != 1 else []) + ["B"] * k)
    raise ExportError(f"{where}: a size of {a} at batch {x} and {b} at batch {y}, which is not c x B^k")


class Twin:
    """The program traced again at batch 5, its nodes found by name."""

    def __init__(self, export_at):
        self.export_at = export_at
        self.nodes = None

    def of(self, n, where):
        if self.nodes is None:
            self.nodes = {m.name: m for m in self.export_at(OTHER_BATCH).graph.nodes}
        m = self.nodes.get(n.name)
        if m is None or m.target != n.target:
            raise ExportError(
                f"aten node `{n.name}` ({where}): traced again at batch {OTHER_BATCH}, the program differs here (the "
                "model's code depends on its batch size), so the generic node's shapes cannot be written in B"
            )
        return m


class _Site:
    """One op call to draw: its node at batch 3 and at batch 5, how its tensors are found, its
    module and a description for messages."""

    def __init__(self, n, n5, ref, path, where, anchor):
        self.n, self.n5, self.ref, self.path, self.where = n, n5, ref, path, where
        self.anchor = anchor  # what a node that reads no graph value lists: a function


class Generic:
    """Draws aten nodes of a `program._Program` as generic nodes."""

    def __init__(self, ex, twin):
        self.ex, self.twin = ex, twin
        self.items = {}  # multi-output call node -> {item: memcal id}
        self.sites = {}  # multi-output call node -> its _Site
        self.outs = {}  # decomposed main node with several returns -> the site of each return
        self.buffers = {}  # buffer placeholder -> its memcal id
        self.decomposed = set()  # targets drawn as their decomposition
        self.infinite = set()  # targets given an infinite float (written as float32's largest)
        self.notes = []

    # --- entry points -------------------------------------------------------------------------

    def draw(self, n):
        """Draws main-graph node `n` (and what it reads that is not drawn); returns its id (None
        for an op with several returns: drawn where a getitem reads one)."""
        import torch

        ex = self.ex
        if n in ex.ids:
            return ex.ids[n]
        where = f"aten node `{n.name}` ({ex.where(n)})"
        if n.target is operator.getitem:
            return self._main_item(n, where)
        if not isinstance(n.target, torch._ops.OpOverload):
            raise ExportError(f"{where}: `{n.target}` is not an ATen operator; the generic node draws ATen calls")
        if composite(n.target):
            return self._decompose(n, where)
        site = _Site(n, self.twin.of(n, where), self._main_ref(n), ex.short(ex.innermost(n)), where,
                     lambda: self._anchor(n))
        val = n.meta.get("val")
        if isinstance(val, (list, tuple)):
            self.sites[n] = site
            return None
        ex.ids[n] = self._call(site)
        return ex.ids[n]

    def finish(self):
        """The notes: each approximation, once."""
        for call, items in self.items.items():
            if len(items) > 1:
                site = self.sites[call]
                path = f"`{site.path}` " if site.path else ""
                self.notes.append(f"{path}{call.target}: {len(items)} of its returns are drawn as {len(items)} nodes of "
                                  "one call (the op's memory is counted once per node)")
        if self.infinite:
            self.notes.append("an infinite argument (a mask's fill) is written as float32's largest finite value, "
                              f"which JSON can write: {', '.join(sorted(self.infinite))}")
        if self.decomposed:
            self.notes.append("drawn as eager autograd decomposes them on the CPU (another device may decompose them "
                              "otherwise): " + ", ".join(sorted(self.decomposed)))
        return self.notes

    # --- what a generic op reads --------------------------------------------------------------

    def _main_ref(self, consumer):
        """How a tensor of the main graph is read by a generic op of `consumer`: ("param", name,
        shape, tensor) or ("id", memcal id), drawing it if it is not drawn."""
        ex = self.ex

        def ref(x):
            r = self._copy_on_the_way(x)
            if r in ex.params:
                t = ex.params[r]
                return ("param", ex.short(ex.targets[r]), [int(d) for d in t.shape], t)
            if r not in ex.ids:
                self._materialize(r, consumer)
            if r not in ex.ids:
                raise ExportError(f"aten node `{consumer.name}` ({ex.where(consumer)}): its input `{r.name}` was not drawn")
            return ("id", ex.ids[r])

        return ref

    def _copy_on_the_way(self, x):
        """What `x` resolves to for a generic op: program.py reads `contiguous` and `clone` as
        their input (memcal's ops copy where torch would), but a generic op runs as torch
        records it, so a copy of a non-contiguous tensor on the way is drawn (a generic clone)."""
        ex = self.ex
        r = x
        while r in ex.alias:
            src = ex.alias[r]
            v = src.meta.get("val") if _is_node(src) else None
            if r.op == "call_function" and str(r.target).split(".")[1] in ("contiguous", "clone") \
                    and _tensor(v) and not v.is_contiguous() and ex.kind(r) != "param":
                if r not in ex.ids:
                    self.draw(r)
                return r
            r = src
        return r

    def _anchor(self, consumer):
        """The id a node that reads no graph value lists (it orders the node and gives its batch):
        the first drawn value the consumer reads, else the last node drawn, else a float input
        of the graph (memcal reads an int64 graph input only by embedding and constant)."""
        ex = self.ex
        for a in _flat(list(consumer.args) + list(consumer.kwargs.values())):
            if _is_node(a) and ex.resolve(a) in ex.ids:
                return ex.ids[ex.resolve(a)]
        if ex.nodes:
            return ex.nodes[-1]["id"]
        floats = [p for p in ex.ep.graph.nodes if p.op == "placeholder" and p in ex.ids
                  and getattr(p.meta.get("val"), "dtype", None) is not None and p.meta["val"].dtype.is_floating_point]
        return ex.ids[floats[0]] if floats else ex.input_names[0]

    def _materialize(self, r, consumer):
        """Draws a tensor the program does not draw, where a generic op reads it."""
        ex = self.ex
        v = r.meta.get("val")
        where = f"aten node `{consumer.name}` ({ex.where(consumer)})"
        if r.op == "placeholder":
            ex.ids[r] = self._buffer(r, consumer, where)
            return
        if ex.kind(r) in ("const", "ivalue") and _tensor(v) and v.dim() > 0 and \
                str(v.dtype) in ("torch.float32", "torch.bool"):
            # A mask of constants, or computed from an int64 input alone (a padding mask): one
            # `constant`, as program.py draws the masks attention reads.
            c = self._constant(r, consumer, where)
            if c is not None:
                ex.ids[r] = c
                return
        self.draw(r)

    def _constant(self, r, consumer, where):
        """A float32 or bool tensor of constants as memcal's `constant` (its shape in "B" and
        sizes), one node per tensor; None when a size is another expression of B."""
        ex = self.ex
        if r in ex.constants:
            return ex.constants[r]
        r5 = self.twin.of(r, where)
        shape = [batch_expr(a, b, where) for a, b in zip(r.meta["val"].shape, r5.meta["val"].shape)]
        if any(isinstance(d, str) and d != "B" for d in shape):
            return None
        attrs = {"shape": shape}
        if str(r.meta["val"].dtype) == "torch.bool":
            attrs["dtype"] = "bool"
        ex.constants[r] = ex.emit(ex.base_id(r, "constant"), "constant", attrs, [self._source(r) or self._anchor(consumer)])
        return ex.constants[r]

    def _source(self, r):
        """The graph input a tensor computed from an int64 input alone is made from (a
        `constant` may read it, for its batch), else None."""
        ex = self.ex
        if ex.kind(r) != "ivalue":
            return None
        seen, todo = set(), [r]
        while todo:
            m = todo.pop()
            if m in seen or not _is_node(m):
                continue
            seen.add(m)
            if m.op == "placeholder" and m in ex.ids:
                return ex.ids[m]
            todo.extend(a for a in _flat(list(m.args) + list(m.kwargs.values())) if _is_node(a))
        return None

    def _buffer(self, r, consumer, where):
        """A buffer (or a constant tensor torch.export lifted) read by a generic op: a tensor of
        its shape and dtype made in each forward (torch keeps it for the model's life: noted)."""
        ex = self.ex
        if r in self.buffers:
            return self.buffers[r]
        v = r.meta.get("val")
        if not _tensor(v):
            raise ExportError(f"{where}: reads `{r.name}`, which is not a tensor")
        name = ex.short(ex.targets.get(r, r.name))
        shape = [int(d) for d in v.shape]
        anchor = self._anchor(consumer)
        base = f"{name}" if name else "buffer"
        if v.dim() > 0 and str(v.dtype) in ("torch.float32", "torch.bool"):
            attrs = {"shape": shape}
            if str(v.dtype) == "torch.bool":
                attrs["dtype"] = "bool"
            i = ex.emit(base, "constant", attrs, [anchor])
        else:
            dt = dtype_name(v.dtype, where)
            i = ex.emit(base, "aten", {"target": "aten.zeros.default", "args": [shape],
                                       "kwargs": {"dtype": {"dtype": dt}}, "shape": shape, "dtype": dt}, [anchor])
        self.buffers[r] = i
        self.notes.append(f"buffer `{name}` {shape} is drawn as a tensor made in each forward (torch keeps it)")
        return i

    # --- main-graph items and decompositions --------------------------------------------------

    def _main_item(self, n, where):
        ex = self.ex
        parent, k = n.args[0], int(n.args[1])
        if parent in self.outs:
            site, out = self.outs[parent][k]
            ex.ids[n] = site(out)
            return ex.ids[n]
        if parent not in self.sites:
            self.draw(parent)
        if parent not in self.sites:
            raise ExportError(f"{where}: item {k} of `{parent.name}`, which is not drawn")
        ex.ids[n] = self._item(parent, k)
        return ex.ids[n]

    def _decompose(self, n, where):
        """A CompositeImplicitAutograd op: its decomposition, drawn op by op."""
        ex = self.ex
        n5 = self.twin.of(n, where)
        ref = self._main_ref(n)
        grads = []
        for a in _flat(list(n.args) + list(n.kwargs.values())):
            if _is_node(a) and _tensor(a.meta.get("val")):
                r = ex.resolve(a)
                grads.append(r in ex.params or (ex.kind(r) == "value" and a.meta["val"].dtype.is_floating_point))
        g3, g5 = _trace_decomposition(n, grads), _trace_decomposition(n5, grads)
        nodes3, nodes5 = list(g3.graph.nodes), list(g5.graph.nodes)
        if [m.target for m in nodes3] != [m.target for m in nodes5]:
            raise ExportError(f"{where}: {n.target} decomposes differently at batch {OTHER_BATCH}")
        self.decomposed.add(str(n.target))
        path = ex.short(ex.innermost(n))
        leaves = [a for a in _flat(list(n.args) + list(n.kwargs.values())) if _is_node(a) and _tensor(a.meta.get("val"))]
        local = {}  # decomposition node -> ("main", main node), ("id", memcal id) or ("item", (call, k))

        def sub_ref(x):
            kind, obj = local[x]
            if kind == "main":
                return ref(obj)
            if kind == "item":
                local[x] = ("id", self._item(*obj))
                kind, obj = local[x]
            return ("id", obj)

        places = [m for m in nodes3 if m.op == "placeholder"]
        for p, leaf in zip(places, leaves):
            local[p] = ("main", leaf)
        output = next(m for m in nodes3 if m.op == "output")
        live = _live(output)
        for m, m5 in zip(nodes3, nodes5):
            if m not in live or m.op in ("placeholder", "output"):
                continue
            if m.op != "call_function":
                raise ExportError(f"{where}: its decomposition reads `{m.target}` ({m.op}), which is not drawn")
            if m.target is operator.getitem:
                local[m] = ("item", (m.args[0], int(m.args[1])))
                continue
            if str(m.target).split(".", 1)[-1] in PASS_THROUGH or _restride(m):
                local[m] = local[m.args[0]]
                continue
            site = _Site(m, m5, sub_ref, path, f"{where}, in its decomposition", lambda: self._anchor(n))
            if isinstance(m.meta.get("val"), (list, tuple)):
                self.sites[m] = site
                continue
            local[m] = ("id", self._call(site))
        result = output.args[0]
        if isinstance(result, (list, tuple)):
            # Each return's id, drawn when a getitem of `n` reads it.
            self.outs[n] = [(lambda x: sub_ref(x)[1], x) for x in result]
            return None
        ex.ids[n] = sub_ref(result)[1]
        return ex.ids[n]

    # --- one call -----------------------------------------------------------------------------

    def _item(self, call, k):
        """Return `k` of a call with several returns, drawn once."""
        items = self.items.setdefault(call, {})
        if k not in items:
            items[k] = self._call(self.sites[call], item=k)
        return items[k]

    def _call(self, site, item=None):
        """Emits the generic node of one op call; returns its id."""
        ex = self.ex
        n, n5 = site.n, site.n5
        target = str(n.target)
        if not target.startswith("aten."):
            raise ExportError(f"{site.where}: `{target}` is not an ATen operator; the generic node draws ATen calls")
        inputs, params, batched = [], [], []

        def enc(v, v5, at):
            if _is_node(v):
                if not _tensor(v.meta.get("val")):
                    raise ExportError(f"{site.where}: argument {at} of {target} is a traced scalar")
                got = site.ref(v)
                if got[0] == "param":
                    _, name, shape, t = got
                    names = [p["name"] for p in params]
                    if name not in names:
                        params.append({"name": name, "shape": shape})
                        names.append(name)
                        ex.drawn.add(id(t))
                    return {"param": names.index(name)}
                if got[1] not in inputs:
                    inputs.append(got[1])
                return {"input": inputs.index(got[1])}
            if isinstance(v, (list, tuple)):
                if not isinstance(v5, (list, tuple)) or len(v5) != len(v):
                    raise ExportError(f"{site.where}: argument {at} of {target} has another length at batch {OTHER_BATCH}")
                return [enc(a, b, at + (i,)) for i, (a, b) in enumerate(zip(v, v5))]
            return _literal(v, v5, at, batched, site.where, target)

        args = [enc(a, b, (i,)) for i, (a, b) in enumerate(zip(n.args, n5.args))]
        kwargs = {k: enc(v, n5.kwargs.get(k), (k,)) for k, v in n.kwargs.items()}
        if any(b[2] == "inf" for b in batched):
            self.infinite.add(target)
            batched = [b for b in batched if b[2] != "inf"]
        if batched:
            done = self._unbatch(site, target, args, batched, inputs)
            if done is not None:
                return done
        attrs = {"target": target, "args": args}
        if kwargs:
            attrs["kwargs"] = kwargs
        if params:
            attrs["params"] = params
        val, val5 = n.meta.get("val"), n5.meta.get("val")
        if isinstance(val, (list, tuple)):
            attrs["outputs"] = [self._spec(t, t5, site) for t, t5 in zip(val, val5)]
            attrs["item"] = item
        else:
            attrs.update(self._spec(val, val5, site))
        if site.path:
            attrs["module"] = site.path
        if not inputs:
            inputs = [site.anchor()]
        op = target.split(".")[1]
        base = f"{site.path}.{op}" if site.path else op
        if item is not None:
            base = f"{base}.{item}"
        return ex.emit(base, "aten", attrs, inputs)

    def _spec(self, t, t5, site):
        if not _tensor(t):
            raise ExportError(f"{site.where}: {site.n.target} returns a {type(t).__name__}, not a tensor")
        spec = {"shape": [batch_expr(a, b, site.where) for a, b in zip(t.shape, t5.shape)],
                "dtype": dtype_name(t.dtype, site.where)}
        if not t.is_contiguous():
            spec["contiguous"] = False
        return spec

    def _unbatch(self, site, target, args, batched, inputs):
        """Int arguments that follow the batch: -1 in a view's or an expand's size; an expand of a
        size-1 axis over the batch as memcal's `expand` (or `parameter`). Returns the id drawn
        instead of a generic node, or None (args rewritten)."""
        ex = self.ex
        name = target.split(".", 1)[1]
        sizes = [b for b in batched if b[0][0] == 1 and len(b[0]) == 2]
        if len(sizes) != len(batched) or name not in SIZED_VIEWS | {"expand.default"}:
            at, a, b = batched[0]
            raise ExportError(
                f"{site.where}: argument {at} of {target} is {a} at batch 3 and {b} at batch {OTHER_BATCH}; the generic "
                "node's arguments are literal, so an argument that follows the batch is drawn only as a view's or "
                "an expand's size"
            )
        out, out5 = list(site.n.meta["val"].shape), list(site.n5.meta["val"].shape)
        if name in SIZED_VIEWS:
            size = [-1 if int(a) != int(b) else int(a) for a, b in zip(out, out5)]
            if size.count(-1) != 1:
                raise ExportError(f"{site.where}: {target} to a shape with {size.count(-1)} sizes that follow the batch")
            args[1] = size
            return None
        x = site.n.args[0]
        shape_in = list(x.meta["val"].shape)
        lead = len(out) - len(shape_in)
        if all(i >= lead and int(shape_in[i - lead]) == int(out[i]) for (_, i), _, _ in sizes):
            for (_, i), _, _ in sizes:
                args[1][i] = -1
            return None
        # A size-1 axis broadcast over the batch: a stride-0 view.
        shape = [batch_expr(a, b, site.where) for a, b in zip(out, out5)]
        if lead or any(isinstance(d, str) and d != "B" for d in shape):
            raise ExportError(f"{site.where}: an expand to {shape}, which memcal's expand cannot draw")
        got = site.ref(x)
        if got[0] == "param":
            _, pname, pshape, t = got
            if pshape[0] != 1 or shape[0] != "B" or any(isinstance(d, str) for d in shape[1:]) or \
                    pshape[1:] != shape[1:]:
                raise ExportError(f"{site.where}: a parameter of shape {pshape} expanded to {shape}")
            ex.drawn.add(id(t))
            return ex.emit(pname, "parameter", {"shape": pshape[1:]}, [site.anchor()])
        base = f"{site.path}.expand" if site.path else "expand"
        return ex.emit(base, "expand", {"shape": shape}, [got[1]])


def _literal(v, v5, at, batched, where, target):
    """A non-tensor argument in the format's encoding; an int that differs between the two
    traces is recorded in `batched`."""
    import torch

    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        if v != v5:
            batched.append((at, v, v5))
        return v
    if isinstance(v, float):
        if math.isnan(v):
            raise ExportError(f"{where}: argument {at} of {target} is NaN, which JSON cannot write")
        if not math.isfinite(v):
            batched.append((at, v, "inf"))  # noted by the caller
            return BIG if v > 0 else -BIG
        return v
    if isinstance(v, torch.dtype):
        return {"dtype": dtype_name(v, where)}
    if isinstance(v, (torch.device, torch.layout, torch.memory_format)):
        return {"other": str(v)}
    raise ExportError(f"{where}: argument {at} of {target} is a {type(v).__name__}, which the graph format cannot write")


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _restride(m):
    """`as_strided_` to the input's own sizes: the output restrided in place to the input's memory
    format (adaptive_avg_pool2d of a channels-last tensor), which moves no memory."""
    if str(m.target) != "aten.as_strided_.default":
        return False
    x = m.args[0].meta.get("val")
    return _tensor(x) and [int(d) for d in m.args[1]] == [int(d) for d in x.shape]


def _live(output):
    """The nodes the output depends on."""
    seen, todo = set(), [output]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(a for a in _flat(list(m.args) + list(m.kwargs.values())) if _is_node(a))
    return seen


def _trace_decomposition(n, grads):
    """The ops eager autograd runs for node `n` (a CompositeImplicitAutograd call): make_fx below
    autograd, on fake CPU tensors of its arguments' shapes, strides and dtypes, requires_grad as
    `grads` says (in the order of the tensor arguments)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    mode = FakeTensorMode()
    fakes = []

    def mark(a):
        if _is_node(a) and _tensor(a.meta.get("val")):
            v = a.meta["val"]
            with mode:
                t = torch.empty_strided(tuple(int(d) for d in v.shape), tuple(int(s) for s in v.stride()),
                                        dtype=v.dtype, device="cpu")
                if grads[len(fakes)] and v.dtype.is_floating_point:
                    # Not a leaf: the model's values are computed (an in-place op may write them).
                    t = t.requires_grad_(True).clone()
            fakes.append(t)
            return ("__tensor__", len(fakes) - 1)
        if isinstance(a, (list, tuple)):
            return type(a)(mark(x) for x in a)
        return a

    args = [mark(a) for a in n.args]
    kwargs = {k: mark(v) for k, v in n.kwargs.items()}

    def put(a, ts):
        if isinstance(a, tuple) and len(a) == 2 and a[0] == "__tensor__":
            return ts[a[1]]
        if isinstance(a, (list, tuple)):
            return type(a)(put(x, ts) for x in a)
        return a

    def call(*ts):
        return n.target(*[put(a, ts) for a in args], **{k: put(v, ts) for k, v in kwargs.items()})

    return make_fx(call, tracing_mode="fake")(*fakes)


# --- memcal's parameter count of a graph (src/ops/parameters.rs) ----------------------------------


def _numel(shape):
    out = 1
    for d in shape:
        out *= int(d)
    return out


def _op_parameters(op, a):
    """Trainable parameters a memcal op owns (docs/graph-format.md), as src/ops/parameters.rs
    counts them."""
    g = a.get
    if op == "linear":
        return (0 if g("tie") else a["in_features"] * a["out_features"]) + (a["out_features"] if g("bias", True) else 0)
    if op == "embedding":
        return 0 if g("tie") else a["num_embeddings"] * a["embedding_dim"]
    if op in ("conv1d", "conv2d"):
        k = a["kernel_size"] ** (1 if op == "conv1d" else 2)
        return a["out_channels"] * (a["in_channels"] // g("groups", 1)) * k + (a["out_channels"] if g("bias", True) else 0)
    if op == "conv_transpose2d":
        return a["in_channels"] * a["out_channels"] * a["kernel_size"] ** 2 + (a["out_channels"] if g("bias", True) else 0)
    if op == "batch_norm":
        return 2 * a["num_features"]
    if op == "layer_norm":
        return a["normalized_shape"] * (2 if g("bias", True) else 1)
    if op == "rms_norm":
        return a["dim"]
    if op == "group_norm":
        return 2 * a["num_channels"]
    if op == "multihead_attention":
        d, kdim, bias = a["embed_dim"], g("kdim", a["embed_dim"]), g("bias", True)
        if g("impl", "separate") == "torch":
            w = 3 * d * d if kdim == d else d * d + 2 * d * kdim
            return w + d * d + (4 * d if bias else 0)
        return 2 * d * d + 2 * d * kdim + (4 * d if bias else 0) + g("relative_attention_buckets", 0) * a["num_heads"]
    if op == "gqa_attention":
        d, h, kv = a["embed_dim"], a["num_heads"], a["num_kv_heads"]
        hd = g("head_dim", d // h)
        bias = g("bias", False)
        q, k = h * hd, kv * hd
        n = 2 * d * q + 2 * d * k
        if bias:
            n += q + 2 * k + (d if bias is True else 0)
        return n + (2 * hd if g("qk_norm", False) else 0)
    if op == "mla_attention":
        d, h, qr, kvr = a["embed_dim"], a["num_heads"], g("q_lora_rank", 0), a["kv_lora_rank"]
        qk = a["qk_nope_head_dim"] + a["qk_rope_head_dim"]
        n = qr * d + qr + h * qk * qr if qr else h * qk * d
        return n + (kvr + a["qk_rope_head_dim"]) * d + kvr + h * (a["qk_nope_head_dim"] + a["v_head_dim"]) * kvr \
            + d * h * a["v_head_dim"]
    if op == "moe":
        return a["num_experts"] * a["dim"] + a["num_experts"] * 3 * a["dim"] * a["hidden"]
    if op in ("lstm", "gru"):
        gates = 4 if op == "lstm" else 3
        h, dirs = a["hidden_size"], 2 if g("bidirectional", False) else 1
        n = 0
        for layer in range(g("num_layers", 1)):
            i = a["input_size"] if layer == 0 else h * dirs
            n += dirs * (gates * h * i + gates * h * h + 2 * gates * h)
        return n
    if op == "learned_position":
        return a["num_positions"] * a["dim"]
    if op == "prepend_token":
        return a["dim"]
    if op == "parameter":
        return _numel(a["shape"])
    return 0


def graph_parameters(graph):
    """memcal's count of a graph's trainable parameters: each op's, a parameter named by several
    generic nodes once."""
    total, shared = 0, set()
    for node in graph["nodes"]:
        a = node.get("attributes", {})
        if node["op"] == "aten":
            for p in a.get("params", []):
                if p["name"] not in shared:
                    shared.add(p["name"])
                    total += _numel(p["shape"])
        else:
            total += _op_parameters(node["op"], a)
    return total
