"""The graph-building pieces both tracers share, with no import of the tracers: the error an
export raises, fresh node ids, appending a node, and the attributes of torch's
nn.MultiheadAttention. A leaf, so trace (the FX tracer), program (the torch.export tracer)
and generic (the generic aten ops) import it and not each other."""


class ExportError(Exception):
    """The module cannot be drawn as a memcal graph; the message names the node and the fix."""


def fresh_id(used, base):
    """A name not yet in `used` (`base`, else `base.2`, `base.3`...), added to it."""
    i, name = 1, base or "node"
    while name in used:
        i += 1
        name = f"{base}.{i}"
    used.add(name)
    return name


def add_node(nodes, used, base, op, attrs, inputs):
    """Appends a graph node with an id not yet in `used` and returns the id."""
    node_id = fresh_id(used, base)
    entry = {"id": node_id, "op": op, "inputs": inputs}
    if attrs:
        entry["attributes"] = attrs
    nodes.append(entry)
    return node_id


def torch_mha_attrs(m, where, *, cross, sdpa, causal, dropout):
    """The `multihead_attention` attributes of torch's nn.MultiheadAttention `m`, for both
    tracers (`where` names it in errors): self-attention, or cross-attention (`cross`) on a
    memory that is key and value (kdim = vdim, the memory's width); under sdpa
    (need_weights=False) torch's own forward, memcal's impl "torch" (batch_first or its default
    [T, B, E] layout); `dropout` on the probabilities in training (sdpa's dropout_p: on CPU
    its math path)."""
    if m.kdim != m.vdim:
        raise ExportError(f"{where}: nn.MultiheadAttention with kdim {m.kdim} != vdim {m.vdim}: memcal's op takes "
                          "one memory as key and value")
    if not m.batch_first and not sdpa:
        raise ExportError(f"{where}: nn.MultiheadAttention with batch_first=False draws under need_weights=False "
                          "(sdpa) only")
    attrs = {"embed_dim": int(m.embed_dim), "num_heads": int(m.num_heads), "causal": bool(causal),
             "bias": m.in_proj_bias is not None}
    if m.kdim != m.embed_dim:
        if not cross:
            raise ExportError(f"{where}: kdim {m.kdim} differs from embed_dim, but the key is the query")
        attrs["kdim"] = int(m.kdim)
    if sdpa:
        attrs.update(backend="sdpa", impl="torch")
        if not m.batch_first:
            attrs["batch_first"] = False
    if dropout:
        attrs["dropout"] = float(dropout)
    return attrs
