"""Exact memory of single ATen ops on torch's own OpInfo sample inputs, forward and backward.

  python3 -m memcal_export.opcheck [--ops mul,exp] [--samples 4] [--device cpu|cuda]
                                   [--out PATH] [--time-budget SECONDS] [--repo .]
                                   [--build-dir target/opcheck]

Writes `tests/fixtures/opinfo/cpu-fp32.json` (or `cuda-fp32.json`), a fixture that a Rust check
compares, sample by sample, with the simulator's rule for the sample's ATen op.

Protocol, per OpInfo of `torch.testing._internal.common_methods_invocations.op_db` (float32 on
the device; `requires_grad=True` when the OpInfo supports autograd in float32, else only the
forward is measured), for its first `--samples` samples in generation order (torch seeded with 0
before generating each OpInfo's samples):
  1. Discovery: the OpInfo callable runs the sample once under a TorchDispatchMode, which sits
     below autograd (CompositeImplicitAutograd ops are already decomposed) and records every ATen
     call with a copy of each tensor argument taken just before the call (storage, size,
     strides, offset, requires_grad). The sample is kept when the forward makes exactly one
     ATen call, or one non-view call plus only view/alias calls (`OpOverload.is_view`: view, t,
     expand, unsqueeze, slice, alias, lift_fresh, ...); the non-view call is the `target`, the
     others are listed in `extra_ops`. Otherwise it is skipped ("2 aten ops: a, b"); a sample
     that raises is skipped with the error, and so is one whose target gets two distinct tensors
     sharing a storage (fresh leaves could not reproduce that; one tensor passed twice is fine).
     A backward runs after discovery as a warm-up.
  2. Inputs: each tensor argument of the target call becomes a fresh leaf with a storage of the
     same size (a plain clone when the tensor is contiguous and fills its storage; else a copy
     of the whole storage viewed with the same size, strides and offset), then
     `requires_grad_(orig.requires_grad)` for floating tensors. One tensor passed twice stays one.
  3. Measurement (one thread, `gc.collect()` first, nothing else allocated between reads):
     forward: base = current bytes with the inputs alive; reset peak; `func(*args, **kwargs)`
       (the recorded OpOverload, autograd on); `peak - base`, `end - base` (outputs held).
     backward, when an output is a strided floating tensor that requires grad: `ones_like` of each
       such output made first; base2 = current; reset peak; `torch.autograd.backward(outs, grads)`
       (no retain_graph); `peak - base2`, `end - base2`; each input's `.grad` storage bytes.
     The measurement runs twice from fresh inputs; `stable` says whether both agree (if not,
     `runs` holds both).
CPU bytes come from the harness's exact counting allocator (`measurement/shim/counters.cpp`,
via `measure.py`), which counts every allocation from every thread. CUDA bytes come from
`torch.cuda.memory_allocated` / `max_memory_allocated` (caching allocator, 512-byte blocks).

Format (`memcal-opcheck/1`), keys sorted, indent 1:
  {"format", "torch", "device", "dtype", "threads", "counter", "truncated" (only when the time
   budget ran out), "samples": [...], "skipped": [...]}
  sample: {"target": "aten.mul.Tensor", "opinfo": "mul", "variant": "", "index": 0,
    "extra_ops": ["aten.t.default"]   (only for the one-op-plus-views form),
    "tensors": [{"shape", "dtype" ("float32", "int64", "bool"), "strides", "storage_offset",
                 "requires_grad", "contiguous", "nbytes" (bytes of its storage)}],
    "args": [...], "kwargs": {...}   (as the dispatch mode saw them: a tensor is {"tensor": i},
       an index into `tensors`; a tensor list a list of those; a dtype its torch name; a
       memory_format, layout or device its str(); a non-finite float {"float": "inf"}; a complex
       {"complex": [re, im]}; anything else {"repr": ...}),
    "outputs": [{"shape", "dtype", "strides", "storage_offset", "nbytes", "requires_grad",
                 "aliases": k or null (shares the storage of input tensor k)}]
       (the leaves of the result in order; a non-tensor leaf is {"value": ...}; a sparse output
       has "layout" instead of strides, storage_offset and nbytes),
    "forward": {"peak", "end"},
    "backward": {"grad_outputs", "peak", "end", "grads": [storage bytes of each tensor's .grad,
       or null], "grads_alias": [k when that .grad shares grad_output k's storage, or null]}
       or null (not measured),
    "stable": true|false, "runs": [{"forward", "backward"}, ...] (only when not stable)}
  skipped: {"opinfo", "variant", "index" (null for the whole OpInfo), "reason"}
Samples are sorted by target, OpInfo, variant, index; skipped by OpInfo, variant, index.
"""

import argparse
import gc
import itertools
import json
import math
import os
import re
import sys
import time

FORMAT = "memcal-opcheck/1"
CPU_COUNTER = "memcal counting CPU allocator (measurement/shim/counters.cpp)"
CUDA_COUNTER = "torch.cuda.memory_allocated (caching allocator, 512-byte blocks)"
RUNS = 2


class CpuMeter:
    """Bytes from the harness's counting CPU allocator."""

    def __init__(self, repo, out_dir):
        from . import measure

        self.counter = measure.Counter(measure.build_counter(repo, out_dir))

    def read(self):
        return self.counter.read()

    def reset_peak(self):
        self.counter.reset_peak()


class CudaMeter:
    """Bytes from the CUDA caching allocator's statistics, synchronized around each read."""

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("opcheck: --device cuda but torch sees no GPU")
        self.cuda = torch.cuda

    def read(self):
        self.cuda.synchronize()
        return self.cuda.memory_allocated(), self.cuda.max_memory_allocated()

    def reset_peak(self):
        self.cuda.synchronize()
        self.cuda.reset_peak_memory_stats()


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def storage_nbytes(t):
    return t.untyped_storage().nbytes()


class Ref:
    """Stands for tensor argument `index` of a recorded call."""

    def __init__(self, index):
        self.index = index


class Call:
    """One ATen call seen by the dispatch mode: its OpOverload, its arguments with tensors
    replaced by `Ref`s, a copy of each tensor (`snaps`) with its metadata (`metas`), and whether
    two distinct tensor arguments share a storage (`shared`)."""

    def __init__(self, func, args, kwargs, snaps, metas, shared):
        self.func, self.args, self.kwargs, self.snaps, self.metas = func, args, kwargs, snaps, metas
        self.shared = shared

    @property
    def name(self):
        return str(self.func)


def tensor_meta(t):
    return {
        "shape": list(t.shape), "dtype": dtype_name(t.dtype), "strides": list(t.stride()),
        "storage_offset": t.storage_offset(), "requires_grad": bool(t.requires_grad),
        "contiguous": bool(t.is_contiguous()), "nbytes": storage_nbytes(t),
    }


def fills_storage(t):
    """Whether a plain clone reproduces the tensor's layout and storage size."""
    return (t.is_contiguous() and t.storage_offset() == 0
            and storage_nbytes(t) == t.numel() * t.element_size())


def snapshot(t):
    """A detached copy of the tensor's whole storage (or of the tensor when it fills it)."""
    import torch

    if t.layout != torch.strided or not (type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter)):
        raise TypeError(f"unsupported tensor argument ({t.layout}, {type(t).__name__})")
    d = t.detach()
    if fills_storage(t):
        return d.clone()
    n = storage_nbytes(t) // t.element_size()
    return d.as_strided((n,), (1,), 0).clone()


def record_call(func, args, kwargs):
    """Builds a `Call`, copying each distinct tensor argument (by identity)."""
    import torch
    from torch.utils._pytree import tree_map

    index, snaps, metas, originals = {}, [], [], []

    def ref(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in index:
            index[id(x)] = len(snaps)
            snaps.append(snapshot(x))
            metas.append(tensor_meta(x))
            originals.append(x)
        return Ref(index[id(x)])

    a, k = tree_map(ref, (tuple(args), dict(kwargs or {})))
    keys = [t.untyped_storage()._cdata for t in originals]
    return Call(func, a, k, snaps, metas, len(set(keys)) < len(keys))


def recreate(call):
    """Fresh leaf tensors for a call's tensor arguments; returns (tensors, args, kwargs)."""
    import torch
    from torch.utils._pytree import tree_map

    tensors = []
    for snap, meta in zip(call.snaps, call.metas):
        t = snap.clone()
        if list(t.shape) != meta["shape"] or list(t.stride()) != meta["strides"] or meta["storage_offset"]:
            t = t.as_strided(meta["shape"], meta["strides"], meta["storage_offset"])
        if t.is_floating_point() or t.is_complex():
            t.requires_grad_(meta["requires_grad"])
        tensors.append(t)
    a, k = tree_map(lambda x: tensors[x.index] if isinstance(x, Ref) else x, (call.args, call.kwargs))
    return tensors, a, k


def discover(op, sample):
    """Runs the sample under a dispatch mode; returns its recorded calls and its result."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(record_call(func, args, kwargs))
            return func(*args, **(kwargs or {}))

    with Recorder():
        result = op(sample.input, *sample.args, **sample.kwargs)
    return calls, result


def choose(calls):
    """The target call and the names of the other (view) calls, or a skip reason."""
    names = [c.name for c in calls]
    if len(calls) == 1:
        return calls[0], [], None
    main = [c for c in calls if not c.func.is_view]
    if len(main) == 1 and calls:
        return main[0], [c.name for c in calls if c is not main[0]], None
    return None, None, f"{len(calls)} aten ops" + (": " + ", ".join(names) if names else "")


def differentiable(outs):
    """The outputs the backward starts from: strided floating tensors that require grad."""
    import torch

    return [o for o in outs if _is_tensor(o) and o.layout == torch.strided and o.requires_grad
            and (o.is_floating_point() or o.is_complex())]


def _is_tensor(x):
    import torch

    return isinstance(x, torch.Tensor)


def leaves(result):
    from torch.utils._pytree import tree_leaves

    return tree_leaves(result)


def warm_backward(result):
    """A backward over the discovery run's result, so that lazy one-time allocations happen
    before the measurement."""
    import torch

    outs = differentiable(leaves(result))
    if outs:
        try:
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        except Exception:
            pass


def measure_once(meter, call, seed=0):
    """One forward (and backward) of the call on fresh inputs; returns the measured phases and
    the output records."""
    import torch

    tensors, args, kwargs = recreate(call)
    torch.manual_seed(seed)
    gc.collect()
    base, _ = meter.read()
    meter.reset_peak()
    result = call.func(*args, **kwargs)
    end, peak = meter.read()
    run = {"forward": {"peak": peak - base, "end": end - base}, "backward": None}
    outs = leaves(result)
    records = [output_record(o, tensors) for o in outs]
    diff = differentiable(outs)
    if diff:
        run["backward"] = measure_backward(meter, diff, tensors)
    del result, outs, diff, args, kwargs, tensors
    return run, records


def measure_backward(meter, outs, tensors):
    """The backward phase: grad_outputs made before the base read."""
    import torch

    grads = [torch.ones_like(o) for o in outs]
    gsize = sum(storage_nbytes(g) for g in grads)
    gc.collect()
    base, _ = meter.read()
    meter.reset_peak()
    torch.autograd.backward(outs, grads)
    end, peak = meter.read()
    got = [storage_nbytes(t.grad) if t.grad is not None else None for t in tensors]
    keys = [g.untyped_storage()._cdata for g in grads]
    shared = [keys.index(t.grad.untyped_storage()._cdata)
              if t.grad is not None and t.grad.untyped_storage()._cdata in keys else None for t in tensors]
    return {"grad_outputs": gsize, "peak": peak - base, "end": end - base, "grads": got,
            "grads_alias": shared}


def measure_call(meter, func, *args, **kwargs):
    """Measures one direct call (e.g. `torch.ops.aten.exp.default` on a tensor) as a sample's
    target would be: returns (run, output records, tensor records)."""
    call = record_call(func, args, kwargs)
    run, records = measure_once(meter, call)
    return run, records, call.metas


def output_record(o, tensors):
    """An output: its layout, and the input tensor whose storage it shares (if any)."""
    import torch

    if not _is_tensor(o):
        return {"value": encode(o)}
    if o.layout != torch.strided:
        return {"shape": list(o.shape), "dtype": dtype_name(o.dtype), "layout": str(o.layout),
                "requires_grad": bool(o.requires_grad), "aliases": None}
    key = o.untyped_storage()._cdata
    aliases = next((i for i, t in enumerate(tensors) if t.untyped_storage()._cdata == key), None)
    return {
        "shape": list(o.shape), "dtype": dtype_name(o.dtype), "strides": list(o.stride()),
        "storage_offset": o.storage_offset(), "nbytes": storage_nbytes(o),
        "requires_grad": bool(o.requires_grad), "aliases": aliases,
    }


def encode(x):
    """An argument as JSON (tensors were replaced by `Ref`s when the call was recorded)."""
    import torch

    if isinstance(x, Ref):
        return {"tensor": x.index}
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"float": str(x)}
    if isinstance(x, complex):
        return {"complex": [encode(x.real), encode(x.imag)]}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        return {str(k): encode(v) for k, v in x.items()}
    if isinstance(x, torch.dtype):
        return dtype_name(x)
    if isinstance(x, (torch.memory_format, torch.layout, torch.device)):
        return str(x)
    return {"repr": clean(repr(x))}


def clean(text, limit=300):
    """A message without addresses, on one line, bounded: fixture bytes stay deterministic."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", str(text)).strip().splitlines()
    return (text[0] if text else "")[:limit]


def measure_sample(meter, op, sample, index):
    """The fixture record of one sample, or a skip reason (a string)."""
    import torch

    try:
        calls, result = discover(op, sample)
        warm_backward(result)
        del result
    except Exception as e:
        return f"error: {type(e).__name__}: {clean(e)}"
    target, extra, reason = choose(calls)
    if reason:
        return reason
    if target.shared:
        return f"inputs share storage: {target.name}"
    try:
        runs = [measure_once(meter, target) for _ in range(RUNS)]
    except Exception as e:
        return f"error: {type(e).__name__}: {clean(e)}"
    rec = {
        "target": target.name, "opinfo": op.name, "variant": op.variant_test_name, "index": index,
        "tensors": target.metas, "args": encode(list(target.args)), "kwargs": encode(target.kwargs),
        "outputs": runs[0][1], "forward": runs[0][0]["forward"], "backward": runs[0][0]["backward"],
    }
    if extra:
        rec["extra_ops"] = extra
    rec["stable"] = all(r[0] == runs[0][0] for r in runs)
    if not rec["stable"]:
        rec["runs"] = [r[0] for r in runs]
    return rec


def op_samples(op, device, n):
    """Up to n samples of the OpInfo in float32 (requires_grad when it supports autograd), or a
    skip reason."""
    import torch

    if torch.float32 not in op.supported_dtypes(device):
        return None, "float32 unsupported"
    grad = bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes(device)
    torch.manual_seed(0)
    try:
        return list(itertools.islice(op.sample_inputs(device, torch.float32, requires_grad=grad), n)), None
    except Exception as e:
        return None, f"error: sample_inputs: {type(e).__name__}: {clean(e)}"


def selected(op_db, names):
    if not names:
        return list(op_db)
    want = set(names)
    full = lambda op: op.name + ("." + op.variant_test_name if op.variant_test_name else "")
    return [op for op in op_db if op.name in want or full(op) in want]


def run_opinfo(meter, op, device, n, deadline):
    """Records and skips of one OpInfo; stops between samples when the deadline passes."""
    samples, reason = op_samples(op, device, n)
    skip = lambda i, r: {"opinfo": op.name, "variant": op.variant_test_name, "index": i, "reason": r}
    if reason:
        return [], [skip(None, reason)], False
    if not samples:
        return [], [skip(None, "no samples")], False
    kept, skipped = [], []
    for i, sample in enumerate(samples):
        if time.monotonic() > deadline:
            return kept, skipped, True
        out = measure_sample(meter, op, sample, i)
        (skipped.append(skip(i, out)) if isinstance(out, str) else kept.append(out))
    return kept, skipped, False


def reason_class(reason):
    if reason.startswith("error: sample_inputs"):
        return "sample_inputs error"
    if reason.startswith("error"):
        return "error"
    if reason.startswith("inputs share"):
        return "inputs share storage"
    if re.match(r"\d+ aten ops", reason):
        return "0 aten ops" if reason.startswith("0 ") else "several aten ops"
    return reason


def collect(meter, ops, device, n, budget):
    """Runs every selected OpInfo; returns (samples, skipped, truncated)."""
    import torch

    deadline = time.monotonic() + (budget if budget else float("inf"))
    samples, skipped, truncated = [], [], False
    for k, op in enumerate(ops):
        if time.monotonic() > deadline:
            truncated = True
            break
        t0 = time.monotonic()
        kept, skips, truncated = run_opinfo(meter, op, device, n, deadline)
        samples += kept
        skipped += skips
        label = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        print(f"[{k + 1}/{len(ops)}] {label}: kept {len(kept)}, skipped {len(skips)} "
              f"({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        if truncated:
            break
    return samples, skipped, truncated


def document(samples, skipped, device, truncated):
    import torch

    doc = {
        "format": FORMAT, "torch": torch.__version__.split("+")[0], "device": device,
        "dtype": "float32", "threads": 1, "counter": CPU_COUNTER if device == "cpu" else CUDA_COUNTER,
        "samples": sorted(samples, key=lambda s: (s["target"], s["opinfo"], s["variant"], s["index"])),
        "skipped": sorted(skipped, key=lambda s: (s["opinfo"], s["variant"], -1 if s["index"] is None else s["index"])),
    }
    if truncated:
        doc["truncated"] = True
    return doc


def summary(doc, n_ops, wall):
    from collections import Counter as Tally

    classes = Tally(reason_class(s["reason"]) for s in doc["skipped"])
    targets = {s["target"] for s in doc["samples"]}
    single = {s["target"] for s in doc["samples"] if "extra_ops" not in s}
    saved = {s["target"] for s in doc["samples"] if set(s.get("extra_ops", [])) <= {"aten.detach.default"}}
    unstable = sum(1 for s in doc["samples"] if not s["stable"])
    by = ", ".join(f"{c} {v}" for c, v in sorted(classes.items(), key=lambda kv: -kv[1]))
    return (f"opcheck: {n_ops} OpInfos, {len(doc['samples'])} samples kept ({unstable} unstable), "
            f"{len(targets)} distinct targets ({len(single)} from single-op samples, {len(saved)} "
            f"counting those whose only other op is aten.detach), "
            f"skipped {len(doc['skipped'])} ({by}){', truncated' if doc.get('truncated') else ''}, "
            f"{wall:.0f}s")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m memcal_export.opcheck", description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", default=None)
    p.add_argument("--time-budget", type=float, default=None, help="seconds; then stop and write")
    p.add_argument("--repo", default=".", help="repository root (for the counting allocator)")
    p.add_argument("--build-dir", default="target/opcheck")
    return p.parse_args(argv)


def main(argv=None):
    import warnings

    a = parse_args(argv)
    t0 = time.monotonic()
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.filterwarnings("ignore")
    gc.freeze()  # op_db's objects: gc.collect() before each read then scans only new ones
    torch.set_num_threads(1)
    meter = CpuMeter(a.repo, a.build_dir) if a.device == "cpu" else CudaMeter()
    ops = selected(op_db, [s for s in a.ops.split(",") if s])
    samples, skipped, truncated = collect(meter, ops, a.device, a.samples, a.time_budget)
    doc = document(samples, skipped, a.device, truncated)
    out = a.out or os.path.join(a.repo, "tests", "fixtures", "opinfo", f"{a.device}-fp32.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    print(summary(doc, len(ops), time.monotonic() - t0), file=sys.stderr)
    return doc


if __name__ == "__main__":
    main()
