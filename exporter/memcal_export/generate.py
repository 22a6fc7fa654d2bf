"""The generation campaign (issue 38, inference as it runs): every model of
`data/models/generate.json` run through Hugging Face transformers' own `model.generate(...)` on
CPU, fp32, under the harness's exact counting allocator (`measure.Counter`), and written as
`memcal-run/1` rows of the regime `cpu-generate`. The rows are measurements, never fitted.

Protocol, per entry (one model build) and per case (batch B, prompt P, new tokens N, cache C):
  * the config is `data/models/<model>/config.json` with the entry's `reduce` fields replaced;
    the model is `AutoModelForCausalLM.from_config` (decoder-only) or
    `AutoModelForSeq2SeqLM.from_config` (`is_encoder_decoder`), float32,
    `attn_implementation="sdpa"` (or the one the entry's `reduce` names as
    `attn_implementation`, for a class that has no sdpa path: transformers refuses sdpa for Gemma2, whose attention soft-caps its logits, and
    builds it with `eager`), random weights seeded with `torch.manual_seed(0)`, `eval()`;
    `torch.set_num_threads(2)`. Its `generation_config` is replaced by a bare
    `GenerationConfig(bos_token_id, pad_token_id, decoder_start_token_id, eos_token_id=None)`: no
    EOS (so that random weights generate exactly N tokens: with no EOS the only stopping
    criterion is the maximum length) and none of the hub's generation settings (no
    `forced_*_token_id`, `no_repeat_ngram_size`, beams...). No logits processor is added, and
    the campaign checks that generate builds none (the list `_get_logits_processor` returns is
    recorded and must be empty).
  * phases, each with the allocated bytes at its start, its peak and its end (the counter's peak
    reset at each phase start), relative to a `gc.collect()`ed baseline taken before the build:
      - `model_load`: building the model (and `eval()`, the generation config). Measured once per
        entry and shared by every case of the entry;
      - `inputs`: `input_ids` `[B, P]` int64 drawn uniformly, with a `torch.Generator` seeded
        with 0, from the longest run of ids in `range(vocab_size)` holding none of the config's
        special ids (bos, eos, pad, decoder start), and `attention_mask` ones `[B, P]` int64;
      - `prefill`: from entering `model.generate(...)` to the forward pre-hook of the model's
        second top-level forward call: generate's setup (cache creation, the encoder's forward
        for an encoder-decoder), the prefill forward, the first token's selection and append;
      - `decode`: from that pre-hook until `generate` returns; its end includes the returned
        sequences (still referenced).
    Forward pre- and post-hooks on the top-level model (and, for an encoder-decoder, on its
    encoder) read the counter and reset its peak at each event; a phase's peak is the largest
    of its windows' peaks, exact. The windows themselves (each event's allocated bytes and the
    peak since the previous event) are kept in the cache file for the simulator's step-by-step
    debugging; the row has the four phases only.
  * `model.generate(input_ids=..., attention_mask=..., max_new_tokens=N, do_sample=False,
    num_beams=1, use_cache=True, pad_token_id=...)`, plus `cache_implementation="static"` for
    the `static` cases (`dynamic` is generate's default, a `DynamicCache`, with sliding-window
    layers where the config has them). Nothing is wrapped around it (generate itself runs under
    `torch.no_grad()`). Its output must have P + N tokens (decoder-only) or N + 1 (an
    encoder-decoder: the decoder start token and N), asserted. transformers keeps the largest
    static-cache length of earlier calls on the model (`_previous_max_cache_length`): it is
    deleted before each case, so that a case's static cache is P + N long whatever ran before.
  * between cases every reference is dropped and `gc.collect()` run; the counter must then be
    back at the model's bytes (`model_load`'s end) exactly, or the campaign raises (a leak would
    make the cases depend on their order).

Cache (`--cache`, resumable): one JSON per measurement, `<graph>/b<B>-prompt<P>-new<N>-<C>.json`;
an existing one is never run again (unless it was measured for another config). Rows: stamped
from the cache into `--runs` (default `data/runs/cpu-generate`),
`<graph>/b<B>-generate-prompt<P>-new<N>-<C>.json`, against `data/graphs/<graph>.json` (written by
`memcal graphs`): its SHA-256 as `gpu_stamp.graph_sha256` computes it, its parameter count as
`campaign.graph_parameters` reads it with the memcal binary. A graph not there yet: measured,
not stamped (`--stamp-only` stamps later). A row never overwrites a file, except that
`--restamp` replaces this campaign's own row of the same measurement once its graph has changed
(as `campaign.py --restamp` does).

Usage: python -m memcal_export.generate --repo . --memcal target/debug/memcal \
          --cache DIR [--runs DIR] [--only GRAPH ...] [--stamp-only] [--restamp]
"""

import argparse
import gc
import json
import os
import socket
import sys
import time
import traceback

from . import measure as M
from .campaign import cpu_name, host_memory, merged_config, now, restampable, write_new
from .gpu_stamp import graph_sha256
from .proof import run_tool

SPEC = os.path.join("data", "models", "generate.json")
SPEC_FORMAT = "memcal-generate-models/1"
REGIME = "cpu-generate"
TOOL = "memcal_export 0.1.0 (generate)"
THREADS = 2
SEED = 0
CACHES = ("dynamic", "static")


class Leak(RuntimeError):
    """The counter did not come back to the model's bytes after a case."""


def load_spec(repo):
    path = os.path.join(repo, SPEC)
    with open(path) as f:
        spec = json.load(f)
    if spec.get("format") != SPEC_FORMAT:
        raise SystemExit(f"{path}: field `format` must be {SPEC_FORMAT}")
    for i, e in enumerate(spec["models"]):
        for k in ("graph", "model", "batches", "prompts", "new", "caches"):
            if k not in e:
                raise SystemExit(f"{path}: models[{i}] has no `{k}`")
        for c in e["caches"]:
            if c not in CACHES:
                raise SystemExit(f"{path}: models[{i}].caches: `{c}` is not one of {', '.join(CACHES)}")
    return spec["models"]


def cases(entry):
    """The entry's cases (batch, prompt, new, cache), in the order they are measured."""
    return [(b, p, n, c) for b in entry["batches"] for p in entry["prompts"] for n in entry["new"]
            for c in entry["caches"]]


def strategy(prompt, new, cache):
    return f"generate:prompt={prompt},new={new},cache={cache}"


def case_name(batch, prompt, new, cache):
    return f"b{batch}-prompt{prompt}-new{new}-{cache}"


def row_name(batch, prompt, new, cache):
    return f"b{batch}-generate-prompt{prompt}-new{new}-{cache}.json"


def attention(entry):
    """The entry's attention implementation: `sdpa` unless its `reduce` names another as
    `attn_implementation` (a field transformers' configs take)."""
    return entry.get("reduce", {}).get("attn_implementation", "sdpa")


def measured_for(config, case):
    """What a measurement depends on; a cached one for anything else is stale."""
    b, p, n, c = case
    return {"config": config, "batch": b, "prompt": p, "new": n, "cache": c}


def _ids(v):
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


def special_ids(hf_config):
    out = set()
    for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        out.update(i for i in _ids(getattr(hf_config, k, None)) if isinstance(i, int))
    return out


def id_range(vocab, specials):
    """The longest run [lo, hi) of ids in range(vocab) holding no special id."""
    cuts = sorted({-1, vocab, *(s for s in specials if 0 <= s < vocab)})
    lo, hi = max(((a + 1, b) for a, b in zip(cuts, cuts[1:])), key=lambda r: r[1] - r[0])
    return lo, hi


def build(config, attn="sdpa"):
    """The entry's transformers model (float32, `attn` attention, eval, seeded)."""
    import torch
    import transformers

    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    auto = transformers.AutoModelForSeq2SeqLM if hf_config.is_encoder_decoder else transformers.AutoModelForCausalLM
    torch.manual_seed(SEED)
    model = auto.from_config(hf_config, attn_implementation=attn, dtype=torch.float32)
    model.eval()
    bad = {str(p.dtype) for p in model.parameters() if p.dtype != torch.float32}
    if bad:
        raise RuntimeError(f"parameters built as {bad}, not float32")
    c = model.config
    vocab = c.get_text_config().vocab_size
    tok = {k: getattr(c, k, None) for k in ("bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id")}
    pad = next((i for i in _ids(tok["pad_token_id"]) + _ids(tok["eos_token_id"]) if 0 <= i < vocab), 0)
    bos = tok["bos_token_id"] if isinstance(tok["bos_token_id"], int) and 0 <= tok["bos_token_id"] < vocab else None
    kwargs = {"bos_token_id": bos, "pad_token_id": pad, "eos_token_id": None}
    if c.is_encoder_decoder:
        kwargs["decoder_start_token_id"] = tok["decoder_start_token_id"]
    model.generation_config = transformers.GenerationConfig(**kwargs)
    return model


class Windows:
    """Counter readings at events; each closes the window since the previous one."""

    def __init__(self, counter, base):
        self.counter = counter
        self.base = base
        self.events = []

    def mark(self, label):
        cur, peak = self.counter.read()
        self.counter.reset_peak()
        t = time.perf_counter()
        prev = self.events[-1]["allocated"] + self.base if self.events else cur
        self.events.append({"event": label, "allocated": cur - self.base, "peak": max(peak, prev, cur) - self.base,
                            "t": t})


def measure_case(counter, model, base, model_end, case):
    """One case on a built model: the phases inputs, prefill, decode (figures relative to
    `base`) and the event windows. Raises Leak if the counter does not come back to
    `model_end` (relative) after the case."""
    import torch

    torch.set_num_threads(THREADS)
    batch, prompt, new, cache = case
    c = model.config
    enc_dec = bool(c.is_encoder_decoder)
    vocab = c.get_text_config().vocab_size
    lo, hi = id_range(vocab, special_ids(c) | special_ids(model.generation_config))
    if hasattr(model, "_previous_max_cache_length"):
        del model._previous_max_cache_length
    phases = []
    state = {}

    def simple_phase(name, f):
        M.run_phase(counter, base, phases, name, f)

    def make_inputs():
        g = torch.Generator().manual_seed(SEED)
        state["input_ids"] = torch.randint(lo, hi, (batch, prompt), generator=g, dtype=torch.int64)
        state["attention_mask"] = torch.ones((batch, prompt), dtype=torch.int64)

    simple_phase("inputs", make_inputs)

    w = Windows(counter, base)
    calls = {"model": 0, "encoder": 0}

    def hook(kind, when):
        def f(*_args):
            if when == "pre":
                calls[kind] += 1
            w.mark(f"{kind}{calls[kind]}.{when}")
        return f

    handles = [model.register_forward_pre_hook(hook("model", "pre")), model.register_forward_hook(hook("model", "post"))]
    if enc_dec:
        enc = model.get_encoder()
        handles += [enc.register_forward_pre_hook(hook("encoder", "pre")), enc.register_forward_hook(hook("encoder", "post"))]
    processors = []
    original = model._get_logits_processor

    def recording(*a, **k):
        out = original(*a, **k)
        processors.extend(type(p).__name__ for p in out)
        return out

    model._get_logits_processor = recording
    kwargs = dict(max_new_tokens=new, do_sample=False, num_beams=1, use_cache=True,
                  pad_token_id=model.generation_config.pad_token_id)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    try:
        w.mark("generate")
        state["out"] = model.generate(input_ids=state["input_ids"], attention_mask=state["attention_mask"], **kwargs)
        w.mark("return")
    finally:
        for h in handles:
            h.remove()
        del model._get_logits_processor
    out_shape = list(state["out"].shape)
    expect = [batch, new + 1] if enc_dec else [batch, prompt + new]
    if out_shape != expect:
        raise AssertionError(f"generate returned {out_shape}, expected {expect}")
    if processors:
        raise AssertionError(f"generate built logits processors {processors}: the protocol adds none")
    ev = w.events
    cut = next((i for i, e in enumerate(ev) if e["event"] == "model2.pre"), None)
    if cut is None:
        raise AssertionError("generate made fewer than two top-level forward calls (new must be >= 2)")
    for name, lo_i, hi_i in (("prefill", 0, cut), ("decode", cut, len(ev) - 1)):
        window = ev[lo_i + 1:hi_i + 1]
        phases.append({"name": name, "start": ev[lo_i]["allocated"], "peak": max(e["peak"] for e in window),
                       "end": ev[hi_i]["allocated"], "wall_seconds": ev[hi_i]["t"] - ev[lo_i]["t"]})
    t0 = ev[0]["t"]
    events = [{**e, "t": round(e["t"] - t0, 6)} for e in ev]
    state.clear()
    gc.collect()
    after, _ = counter.read()
    if after - base != model_end:
        raise Leak(f"after the case the counter is at {after - base:,} bytes, not the model's {model_end:,}: something outlived it")
    return {"phases": phases, "events": events, "output_shape": out_shape, "logits_processors": processors,
            "forward_calls": calls["model"], "encoder_calls": calls["encoder"], "input_id_range": [lo, hi]}


def load_model(counter, config, attn="sdpa"):
    """Builds the model under the `model_load` phase: (model, base, phase)."""
    import torch

    torch.set_num_threads(THREADS)
    gc.collect()
    base, _ = counter.read()
    counter.reset_peak()
    t0 = time.perf_counter()
    model = build(config, attn)
    wall = time.perf_counter() - t0
    end, peak = counter.read()
    phase = {"name": "model_load", "start": 0, "peak": max(peak, base) - base, "end": end - base, "wall_seconds": wall}
    return model, base, phase


def describe(model, entry):
    import torch
    import transformers

    return {
        "implementation": {
            "library": f"transformers {transformers.__version__}",
            "class": type(model).__name__,
            "config": f"models/{entry['model']}/config.json",
            **({"reduced": entry["reduce"]} if "reduce" in entry else {}),
        },
        "attn_implementation": model.config._attn_implementation,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__.split("+")[0],
    }


def graph_parameters(memcal, repo, graph_path, seq):
    """The graph's parameter count as memcal reads it: `campaign.graph_parameters` (`memcal
    plan`, run where no data folder is), at sequence `seq` for the graph's symbolic sequence
    axis where it has one (the count does not depend on it)."""
    import shutil
    import tempfile

    with open(graph_path) as f:
        symbolic = any(d == "T" for i in json.load(f).get("inputs", []) for d in i.get("shape", []))
    with tempfile.TemporaryDirectory() as elsewhere:
        # A copy of the factors beside no rows: `--factors` plans with the data folder it lives
        # in, and the repository's is the one being written.
        factors = os.path.join(elsewhere, "factors.json")
        shutil.copyfile(os.path.join(repo, "data", "factors.json"), factors)
        r = run_tool([memcal, "plan", os.path.abspath(graph_path), "--batch", "1",
                      *(["--seq", str(seq)] if symbolic else []),
                      "--precision", "fp32", "--factors", factors, "--json"], cwd=elsewhere)
    return json.loads(r.stdout)["parameters"]


def stamp(measured, entry, case, graph_path, graph_params):
    """The `memcal-run/1` row of one cached measurement, planned from `graph_path`."""
    batch, prompt, new, cache = case
    phases = []
    for p in measured["phases"]:
        phases.append({
            "name": p["name"],
            "status": "ok",
            "allocated_start": p["start"],
            "reserved_start": p["start"],
            "allocated_peak": p["peak"],
            "reserved_peak": p["peak"],
            "allocated_end": p["end"],
            "reserved_end": p["end"],
            "wall_seconds": p["wall_seconds"],
        })
    top = max(phases, key=lambda p: p["allocated_peak"])  # the first phase at the highest peak
    strat = strategy(prompt, new, cache)
    return {
        "format": "memcal-run/1",
        "run_id": f"{REGIME}/{entry['graph']}/b{batch}/{strat}",
        "graph": {"name": entry["graph"], "sha256": graph_sha256(graph_path)},
        "batch": batch,
        "precision": "fp32",
        "regime": REGIME,
        "strategy": strat,
        "device": {
            "kind": "cpu",
            "name": measured["device_name"],
            "capacity_bytes": measured["capacity_bytes"],
            "allocator": "cpu-counting-allocator",
            "reserved_equals_allocated": True,
            "torch": measured["torch"],
            "cores": THREADS,
        },
        "host": measured["host"],
        "timestamp": measured["timestamp"],
        "tool_version": TOOL,
        "implementation": measured["implementation"],
        "parameters": {"graph": graph_params, "built": measured["parameters"]},
        "graph_mismatch": graph_params != measured["parameters"],
        "status": "completed",
        "phases": phases,
        "peak": {
            "allocated_bytes": top["allocated_peak"],
            "reserved_bytes": top["reserved_peak"],
            "phase": top["name"],
        },
    }


def measure_entry(counter, entry, config, todo, on_case):
    """Builds the entry's model once and measures each case of `todo`; `on_case(case, measured)`
    receives each measurement (with the model_load phase first)."""
    attn = attention(entry)
    model, base, load = load_model(counter, config, attn)
    info = describe(model, entry)
    if info["attn_implementation"] != attn:
        raise RuntimeError(f"{entry['graph']}: built with attention {info['attn_implementation']}, not {attn}")
    try:
        for case in todo:
            timestamp = now()
            m = measure_case(counter, model, base, load["end"], case)
            m["phases"] = [load] + m["phases"]
            on_case(case, {"measured_for": measured_for(config, case), "timestamp": timestamp, **info, **m})
    finally:
        del model
        gc.collect()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--memcal", required=True, help="the memcal binary (plan: the graphs' parameter counts)")
    ap.add_argument("--cache", required=True, help="folder of the measurements (resumable)")
    ap.add_argument("--runs", help=f"folder of the rows (default: <repo>/data/runs/{REGIME})")
    ap.add_argument("--only", action="append", help="only these graphs (default: every model)")
    ap.add_argument("--stamp-only", action="store_true", help="measure nothing; stamp rows from the cache")
    ap.add_argument("--restamp", action="store_true",
                    help="replace this campaign's rows whose graph has changed since (same measurement, new graph SHA-256); other files are never touched")
    args = ap.parse_args(argv)
    args.memcal = os.path.abspath(args.memcal)
    runs = args.runs or os.path.join(args.repo, "data", "runs", REGIME)
    entries = [e for e in load_spec(args.repo) if not args.only or e["graph"] in args.only]
    total = sum(len(cases(e)) for e in entries)
    counter = None
    done = 0
    failed = []
    for entry in entries:
        config = merged_config(args.repo, entry)
        graph_path = os.path.join(args.repo, "data", "graphs", entry["graph"] + ".json")
        graph_params = None
        if os.path.exists(graph_path) and os.path.exists(args.memcal):
            try:
                graph_params = graph_parameters(args.memcal, args.repo, graph_path, min(entry["prompts"]))
            except RuntimeError as e:  # measured all the same; stamped by a later --stamp-only
                print(f"{entry['graph']}: {e}: not stamped", flush=True)
        index = {}
        todo = []
        for case in cases(entry):
            done += 1
            index[case] = done
            cached = os.path.join(args.cache, entry["graph"], case_name(*case) + ".json")
            if os.path.exists(cached):
                with open(cached) as f:
                    if json.load(f).get("measured_for") != measured_for(config, case):
                        os.remove(cached)  # the campaign's own cache: measured for another config
                        print(f"[{done}/{total}] {entry['graph']} {case_name(*case)}: the cached measurement was for another config", flush=True)
            if not os.path.exists(cached):
                todo.append(case)

        def label(case):
            b, p, n, c = case
            return f"[{index[case]}/{total}] {entry['graph']} b{b} prompt{p} new{n} {c}"

        def on_case(case, measured):
            measured.update(device_name=cpu_name(), capacity_bytes=host_memory(), host=socket.gethostname())
            write_new(os.path.join(args.cache, entry["graph"], case_name(*case) + ".json"), measured)
            peak = max(p["peak"] for p in measured["phases"])
            wall = sum(p["wall_seconds"] for p in measured["phases"][1:])
            print(f"{label(case)}: peak {peak / 1e6:.2f} MB, {wall:.1f} s", flush=True)

        if todo and args.stamp_only:
            for case in todo:
                print(f"{label(case)}: not measured yet", flush=True)
        elif todo:
            if counter is None:
                counter = M.Counter(M.build_counter(args.repo, os.path.join(args.cache, "build")))
            try:
                measure_entry(counter, entry, config, todo, on_case)
            except Exception:  # noqa: BLE001 - the other entries still run; the exit status says it
                traceback.print_exc()
                print(f"{entry['graph']}: FAILED (the cases measured before the failure are cached)", flush=True)
                failed.append(entry["graph"])
        for case in cases(entry):
            cached = os.path.join(args.cache, entry["graph"], case_name(*case) + ".json")
            if not os.path.exists(cached):
                continue
            if graph_params is None:
                if args.stamp_only:
                    print(f"{label(case)}: no {graph_path} (run `memcal graphs`) or no {args.memcal}: not stamped", flush=True)
                continue
            with open(cached) as f:
                measured = json.load(f)
            row = stamp(measured, entry, case, graph_path, graph_params)
            row_path = os.path.join(runs, entry["graph"], row_name(*case))
            if args.restamp and restampable(row_path, row):
                os.remove(row_path)
            wrote = write_new(row_path, row)
            if args.stamp_only or not wrote:
                print(f"{label(case)}: {'row written' if wrote else 'row exists: left as it is'}", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
