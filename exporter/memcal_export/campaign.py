"""The real-model campaign: every model of `data/models/measured.json` measured as the code
people run, on CPU, fp32, and written as `memcal-run/1` rows of the regime `cpu-real`.

For each model and batch:
  1. the config is `data/models/<model>/config.json` with the entry's `reduce` fields replaced;
  2. the transformers class of its `model_type` is built from it (random weights, float32,
     train mode) and trained three AdamW steps under the harness's protocol with its exact
     counting allocator (`measure.py`); the inputs are the ones the imported graph declares
     (`memcal import hf` of the same config), so both sides see the same tensors;
  3. the measurement is kept in `--cache` (`<graph>/b<batch>.json`: resumable, a measured
     batch is never run again), and stamped as a row under `--runs` (default
     `data/runs/cpu-real/<graph>/b<batch>.json`) against `data/graphs/<graph>.json` (written by
     `memcal graphs`), the graph the row is planned from.

A row never overwrites another file: an existing row is left as it is. The measurement does not
depend on the graph: a row stamped against a graph that later changes is excluded as
`graph-changed` until `--restamp` stamps it again from its cached measurement (it replaces only
a row this campaign wrote of the same measurement, timestamp and phases alike).

Usage: python -m memcal_export.campaign --repo . --memcal target/release/memcal \
          --cache DIR [--runs DIR] [--only GRAPH ...] [--stamp-only] [--restamp]
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import socket
import sys

from . import measure as M
from .proof import run_tool

SPEC = os.path.join("data", "models", "measured.json")
SPEC_FORMAT = "memcal-measured-models/1"
REGIME = "cpu-real"
TOOL = "memcal_export 0.1.0 (campaign)"
THREADS = 2

# model_type -> the transformers class `memcal import hf` draws (its `KINDS` table).
CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "t5": "T5ForConditionalGeneration",
    "bart": "BartForConditionalGeneration",
    "vit": "ViTForImageClassification",
}

# A graph input's name -> the keyword the transformers forward takes it as (the others are
# the loss's targets).
KEYWORDS = {
    "tokens": "input_ids",
    "input_ids": "input_ids",
    "token_type_ids": "token_type_ids",
    "decoder_input_ids": "decoder_input_ids",
    "images": "pixel_values",
}


def load_spec(repo):
    path = os.path.join(repo, SPEC)
    with open(path) as f:
        spec = json.load(f)
    if spec.get("format") != SPEC_FORMAT:
        raise SystemExit(f"{path}: field `format` must be {SPEC_FORMAT}")
    return spec["models"]


def merged_config(repo, entry):
    """The entry's config as a dict: the model's config.json with `reduce` applied."""
    with open(os.path.join(repo, "data", "models", entry["model"], "config.json")) as f:
        config = json.load(f)
    config.update(entry.get("reduce", {}))
    return config


def import_graph(memcal, repo, entry, config, tmp):
    """The graph `memcal import hf` draws for the entry (written to `tmp`), parsed."""
    os.makedirs(tmp, exist_ok=True)
    cfg_path = os.path.join(tmp, entry["graph"] + ".config.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    out = os.path.join(tmp, entry["graph"] + ".json")
    cmd = [memcal, "import", "hf", cfg_path, "--name", entry["graph"], "--out", out, "--force"]
    if "seq" in entry:
        cmd += ["--seq", str(entry["seq"])]
    run_tool(cmd, cwd=repo)
    with open(out) as f:
        return json.load(f)


def make_inputs(graph, batch):
    """One tensor per graph input, at `batch`: int64 class indices or float32 normals."""
    import torch

    out = {}
    for i in graph["inputs"]:
        shape = [batch if d == "B" else d for d in i["shape"]]
        if i["dtype"] == "int64":
            out[i["name"]] = torch.randint(i.get("classes") or 1, shape)
        else:
            out[i["name"]] = torch.randn(shape)
    return out


def criterion(graph):
    """The graph's loss on the real model's output: (the output's field, the target input, the
    function of the two tensors): cross-entropy of the logits on `labels`, or (an encoder with
    its pooler) the mean squared error of the pooled output against `target`; None for a loss op
    with no real counterpart here."""
    import torch.nn.functional as F

    loss_op = next(n["op"] for n in graph["nodes"] if n["id"] == graph["loss"])
    if loss_op == "cross_entropy":
        return "logits", "labels", lambda logits, labels: F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    if loss_op == "mse":
        return "pooler_output", "target", F.mse_loss
    return None


def loss_of(graph):
    """The graph's loss applied to the real model's output (`criterion`)."""
    names = [i["name"] for i in graph["inputs"]]
    forward = [n for n in names if n in KEYWORDS]
    causal = "tokens" in names
    crit = criterion(graph)

    def loss(model, inputs):
        kwargs = {KEYWORDS[n]: inputs[n] for n in forward}
        if causal or "decoder_input_ids" in names:
            kwargs["use_cache"] = False
        out = model(**kwargs)
        if crit is None:
            loss_op = next(n["op"] for n in graph["nodes"] if n["id"] == graph["loss"])
            raise RuntimeError(f"graph {graph['name']}: loss op {loss_op} has no real counterpart here")
        field, target, f = crit
        return f(getattr(out, field), inputs[target])

    return loss


def measure_entry(counter, entry, config, graph, batch):
    import torch
    import transformers

    if config.get("model_type") not in CLASSES:
        raise ValueError(f"model_type `{config.get('model_type')}`: the campaign measures {', '.join(sorted(CLASSES))} (campaign.CLASSES)")
    cls_name = CLASSES[config["model_type"]]
    cls = getattr(transformers, cls_name)
    model_type = config["model_type"]
    fields = {k: v for k, v in config.items() if k != "model_type"}

    def build():
        m = cls(transformers.AutoConfig.for_model(model_type, **fields))
        m.train()
        bad = {str(p.dtype) for p in m.parameters() if p.dtype != torch.float32}
        if bad:
            raise RuntimeError(f"{entry['graph']}: parameters built as {bad}, not float32")
        return m

    timestamp = now()
    phases, params = M.measure(
        counter, build, lambda: make_inputs(graph, batch), loss_of(graph), threads=THREADS
    )
    return {
        "measured_for": measured_for(config, graph),
        "timestamp": timestamp,
        "phases": phases,
        "parameters": params,
        "implementation": {
            "library": f"transformers {transformers.__version__}",
            "class": cls_name,
            "config": f"models/{entry['model']}/config.json",
            **({"reduced": entry["reduce"]} if "reduce" in entry else {}),
        },
        "torch": torch.__version__.split("+")[0],
    }


def measured_for(config, graph):
    """What a measurement depends on: the config it was built from and the inputs it was fed
    (the imported graph's). A cached measurement for anything else is stale."""
    return {"config": config, "inputs": graph["inputs"]}


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def host_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def graph_parameters(memcal, repo, graph_path):
    """The graph's parameter count as memcal reads it (`memcal plan`, run where no data folder
    is, so that it reads no rows)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as elsewhere:
        # A copy of the factors beside no rows: `--factors` plans with the data folder it lives
        # in, and the repository's is the one being written.
        factors = os.path.join(elsewhere, "factors.json")
        shutil.copyfile(os.path.join(repo, "data", "factors.json"), factors)
        r = run_tool([memcal, "plan", os.path.abspath(graph_path), "--batch", "1", "--precision", "fp32",
                 "--factors", factors, "--json"], cwd=elsewhere)
    return json.loads(r.stdout)["parameters"]


def stamp(measured, entry, batch, graph_path, graph_params):
    """The `memcal-run/1` row of one cached measurement, planned from `graph_path`."""
    with open(graph_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
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
    return {
        "format": "memcal-run/1",
        "run_id": f"{REGIME}/{entry['graph']}/b{batch}",
        "graph": {"name": entry["graph"], "sha256": sha},
        "batch": batch,
        "precision": "fp32",
        "regime": REGIME,
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


def restampable(path, row):
    """Whether the row at `path` is this campaign's row of the same measurement, stamped against
    another graph (what `--restamp` replaces); any other file is left alone."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return False
    same = {k: old.get(k) for k in ("run_id", "timestamp", "phases", "implementation", "tool_version")}
    return old.get("graph") != row["graph"] and same == {k: row[k] for k in same}


def write_new(path, value):
    """Writes `value` as JSON to `path` unless a file is there (never overwrites)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "x") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
        return True
    except FileExistsError:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--memcal", required=True, help="the memcal binary (import hf, plan)")
    ap.add_argument("--cache", required=True, help="folder of the measurements (resumable)")
    ap.add_argument("--runs", help="folder of the rows (default: <repo>/data/runs/cpu-real)")
    ap.add_argument("--only", action="append", help="only these graphs (default: every model)")
    ap.add_argument("--stamp-only", action="store_true", help="measure nothing; stamp rows from the cache")
    ap.add_argument("--restamp", action="store_true",
                    help="replace this campaign's rows whose graph has changed since (same measurement, new graph SHA-256); other files are never touched")
    args = ap.parse_args(argv)
    args.memcal = os.path.abspath(args.memcal)
    runs = args.runs or os.path.join(args.repo, "data", "runs", REGIME)
    # Entries measured on a GPU are the GPU campaign's (memcal_export.gpu, memcal_export.gpu_stamp).
    entries = [e for e in load_spec(args.repo)
               if e.get("device", "cpu") == "cpu" and (not args.only or e["graph"] in args.only)]
    total = sum(len(e["batches"]) for e in entries)
    counter = None
    done = 0
    for entry in entries:
        config = merged_config(args.repo, entry)
        graph = import_graph(args.memcal, args.repo, entry, config, os.path.join(args.cache, "graphs"))
        graph_path = os.path.join(args.repo, "data", "graphs", entry["graph"] + ".json")
        graph_params = graph_parameters(args.memcal, args.repo, graph_path) if os.path.exists(graph_path) else None
        for batch in entry["batches"]:
            done += 1
            cached = os.path.join(args.cache, entry["graph"], f"b{batch}.json")
            if os.path.exists(cached):
                with open(cached) as f:
                    if json.load(f).get("measured_for") != measured_for(config, graph):
                        os.remove(cached)  # the campaign's own cache: measured for another config
                        print(f"[{done}/{total}] {entry['graph']} b{batch}: the cached measurement was for another config or inputs", flush=True)
            if not os.path.exists(cached):
                if args.stamp_only:
                    print(f"[{done}/{total}] {entry['graph']} b{batch}: not measured yet", flush=True)
                    continue
                if counter is None:
                    counter = M.Counter(M.build_counter(args.repo, os.path.join(args.cache, "build")))
                measured = measure_entry(counter, entry, config, graph, batch)
                measured.update(device_name=cpu_name(), capacity_bytes=host_memory(), host=socket.gethostname())
                write_new(cached, measured)
            with open(cached) as f:
                measured = json.load(f)
            peak = max(p["peak"] for p in measured["phases"])
            if graph_params is None:
                print(f"[{done}/{total}] {entry['graph']} b{batch}: peak {peak:,} (no {graph_path}: run `memcal graphs`; not stamped)", flush=True)
                continue
            row = stamp(measured, entry, batch, graph_path, graph_params)
            row_path = os.path.join(runs, entry["graph"], f"b{batch}.json")
            if args.restamp and restampable(row_path, row):
                os.remove(row_path)
            wrote = write_new(row_path, row)
            print(f"[{done}/{total}] {entry['graph']} b{batch}: peak {peak:,}{'' if wrote else ' (row exists: left as it is)'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
