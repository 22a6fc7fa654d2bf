"""Turns the GPU campaign's measurements (`memcal_export.gpu`, format `memcal-gpu-measurement/1`,
committed under `data/gpu/<campaign>/`) into `memcal-run/1` rows, and writes the campaign's
summary.

Rows: every `train` job of a model that `data/models/measured.json` lists with
`"device": "cuda"` becomes a row of the regime `cuda-real` under
`data/runs/cuda-real/<graph>/b<batch>[-bf16][-<allocator>][-cap<factor>].json` (`-bf16`: the
precision `bf16`, bf16 weights, gradients and AdamW states; none: `bf16-autocast`), planned from
`data/graphs/<graph>.json` (written by `memcal graphs`): completed rows and real out-of-memory
rows alike, with the allocator settings it ran under (`device.allocator_settings`) and, for a
job at an emulated capacity, `device.emulated_capacity_bytes`. A job measured twice (a later
campaign repeating it as the reference of its capped jobs) is stamped once, from the first
campaign; `--summary` says whether the repeat gave the same bytes.

Every `lora` job (peft LoRA over a bf16 base, fp32 adapters, under bf16 autocast) becomes a
strategy row of the precision `bf16` and the strategy `lora:r=<rank>` under
`data/runs/cuda-real/<graph>/b<batch>-bf16-lora-r<rank>[-<allocator>].json` (its
`parameters.built` the base's: the measurement's count less `adapter_parameters`).

Not rows (the run format has no profile for them yet): `generate` with dynamic and static
caches. They stay measurements; `--summary` writes all of them, measured, into a Markdown
table.

A row never overwrites another file (`--restamp` replaces only rows this tool wrote).

Usage: python -m memcal_export.gpu_stamp --repo . --memcal target/release/memcal \
          --from data/gpu/2026-12-04-h200 [--summary docs/gpu-campaign.md]
"""

import argparse
import glob
import hashlib
import json
import os
import sys

from .campaign import graph_parameters, load_spec

REGIME = "cuda-real"
TOOL = "memcal_export 0.1.0 (gpu)"
SHORT = {"default": None, "expandable": "expandable", "split512": "split512"}


def measurements(root):
    """Every measurement under `root` (its campaigns' `real-*/` folders), first campaign first."""
    out = []
    for folder in sorted(glob.glob(os.path.join(root, "real-*"))):
        for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
            with open(path) as f:
                m = json.load(f)
            if m.get("format") != "memcal-gpu-measurement/1":
                raise SystemExit(f"{path}: field `format` must be memcal-gpu-measurement/1")
            m["_path"] = path
            out.append(m)
    return out


def allocator_tag(job):
    """The short name of the job's allocator setting in its row's file and run id (None: the
    defaults)."""
    return SHORT.get(job["allocator"], job["allocator"])


# The precisions of `train` jobs that become rows, and what the row's file and run id add.
PRECISION_TAG = {"bf16-autocast": None, "bf16": "bf16"}


def row_precision(job):
    """The row's precision profile: a `lora` job's base is bf16 (`bf16`), a `train` job's is
    its own."""
    return "bf16" if job["kind"] == "lora" else job["precision"]


def row_name(job):
    name = f"b{job['batch']}"
    if PRECISION_TAG[row_precision(job)]:
        name += "-" + PRECISION_TAG[row_precision(job)]
    if job["kind"] == "lora":
        name += f"-lora-r{job['rank']}"
    if allocator_tag(job):
        name += "-" + allocator_tag(job)
    if "cap_factor" in job:
        name += f"-cap{job['cap_factor']}"
    return name


def graph_sha256(graph_path):
    """The hash a row names its graph by: the file's bytes, or, for a graph with approximation
    notes, the bytes of the same graph without them (serde_json's pretty form, which
    `json.dumps(indent=2)` writes identically), the hash memcal's loader also accepts
    (`Graph.sha256_without_notes`). Notes do not change what is measured, so rows measured before
    a note was written stay current."""
    with open(graph_path, "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    if not doc.get("notes"):
        return hashlib.sha256(raw).hexdigest()
    del doc["notes"]
    bare = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    return hashlib.sha256(bare).hexdigest()


def stamp(m, graph, graph_path, graph_params):
    job = m["job"]
    sha = graph_sha256(graph_path)
    device = {k: m["device"][k] for k in ("kind", "name", "capacity_bytes")}
    if m.get("emulated_capacity_bytes"):
        device["emulated_capacity_bytes"] = m["emulated_capacity_bytes"]
    device["allocator"] = m["device"]["allocator"]
    if m.get("alloc_conf"):
        device["allocator_settings"] = m["alloc_conf"]
    for k in ("reserved_equals_allocated", "torch", "cuda", "driver", "cores"):
        device[k] = m["device"][k]
    run_id = f"{REGIME}/{graph}/b{job['batch']}"
    if PRECISION_TAG[row_precision(job)]:
        run_id += "/" + PRECISION_TAG[row_precision(job)]
    if job["kind"] == "lora":
        run_id += f"/lora:r={job['rank']}"
    if allocator_tag(job):
        run_id += "/" + allocator_tag(job)
    if m.get("emulated_capacity_bytes"):
        run_id += f"/cap{m['emulated_capacity_bytes'] / 2**30:.2f}"
    # A LoRA measurement counts its adapters too; the row's graph is the base.
    built = m["parameters"] - m.get("adapter_parameters", 0)
    phases = [{k: p[k] for k in ("name", "status", "allocated_start", "reserved_start", "allocated_peak",
                                  "reserved_peak", "allocated_end", "reserved_end", "wall_seconds")}
              for p in m["phases"]]
    row = {
        "format": "memcal-run/1", "run_id": run_id,
        "graph": {"name": graph, "sha256": sha},
        "batch": job["batch"], "precision": row_precision(job), "regime": REGIME,
        "device": device, "host": m["host"], "timestamp": m["timestamp"], "tool_version": TOOL,
        "implementation": {k: v for k, v in m["implementation"].items() if k in ("library", "class", "config", "reduced")},
        "parameters": {"graph": graph_params, "built": built},
        "graph_mismatch": graph_params != built,
        "status": m["status"], "phases": phases,
    }
    if job["kind"] == "lora":
        row["strategy"] = f"lora:r={job['rank']}"
    if m["status"] == "completed":
        top = max(phases, key=lambda p: p["allocated_peak"])
        row["peak"] = {"allocated_bytes": top["allocated_peak"],
                       "reserved_bytes": max(p["reserved_peak"] for p in phases), "phase": top["name"]}
    else:
        row[m["status"]] = m[m["status"]]
    return row


def write_row(path, row, restamp):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old == row:
            return "unchanged"
        if not (restamp and old.get("tool_version") == TOOL and old.get("run_id") == row["run_id"]):
            return "exists (left as it is)"
        os.remove(path)
    with open(path, "x") as f:
        json.dump(row, f, indent=2)
        f.write("\n")
    return "written"


def gib(x):
    return f"{x / 2**30:.2f}"


def summary(ms):
    """The Markdown table of every measurement, grouped by kind (numbers from the files)."""
    lines = ["| kind | model | precision | batch | tokens | cache / rank | allocator | cap | status | allocated peak GiB | reserved peak GiB | reserved / allocated | peak phase | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in sorted(ms, key=lambda m: (m["job"]["kind"], m["job"]["model"], m["job"]["precision"], m["job"]["allocator"],
                                        m["job"]["batch"], m["job"].get("cache") or "", m["job"].get("cap_factor", 0))):
        j = m["job"]
        ap = max(p["allocated_peak"] for p in m["phases"])
        rp = max(p["reserved_peak"] for p in m["phases"])
        top = max(m["phases"], key=lambda p: p["allocated_peak"])["name"]
        tokens = f"{j['prompt']}+{j['decode']}" if j["kind"] == "generate" else str(j["seq"])
        extra = j.get("cache") or (f"r={j['rank']}" if j["kind"] == "lora" else "")
        cap = f"{j['cap_factor']} x ({gib(m['emulated_capacity_bytes'])} GiB)" if m.get("emulated_capacity_bytes") else ""
        status = m["status"] + (f" in {m[m['status']]['phase']}" if m["status"] != "completed" else "")
        lines.append(f"| {j['kind']} | {j['model']} | {j['precision']} | {j['batch']} | {tokens} | {extra} | {j['allocator']} | {cap} | {status} | {gib(ap)} | {gib(rp)} | {rp / ap:.3f} | {top} | {m['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--memcal", required=True, help="the memcal binary (plan, for the graph's parameter count)")
    ap.add_argument("--from", dest="source", required=True, help="a campaign folder under data/gpu/")
    ap.add_argument("--runs", help="folder of the rows (default: <repo>/data/runs/cuda-real)")
    ap.add_argument("--summary", help="also write the table of every measurement to this Markdown file")
    ap.add_argument("--restamp", action="store_true", help="replace rows this tool wrote that differ")
    args = ap.parse_args(argv)
    args.memcal = os.path.abspath(args.memcal)
    runs = args.runs or os.path.join(args.repo, "data", "runs", REGIME)
    graphs = {e["model"]: e["graph"] for e in load_spec(args.repo) if e.get("device") == "cuda"}
    params = {}
    ms = measurements(args.source)
    seen = {}
    repeats = []
    for m in ms:
        job = m["job"]
        if job["id"] in seen:
            first = seen[job["id"]]
            same = [p["allocated_peak"] for p in first["phases"]] == [p["allocated_peak"] for p in m["phases"]]
            repeats.append((job["id"], same))
            continue
        seen[job["id"]] = m
        if job["kind"] not in ("train", "lora") or job["precision"] not in PRECISION_TAG or job["model"] not in graphs:
            continue
        graph = graphs[job["model"]]
        graph_path = os.path.join(args.repo, "data", "graphs", graph + ".json")
        if not os.path.exists(graph_path):
            raise SystemExit(f"{graph_path}: missing; run `memcal graphs --out data/graphs` first")
        if graph not in params:
            params[graph] = graph_parameters(args.memcal, args.repo, graph_path)
        row = stamp(m, graph, graph_path, params[graph])
        path = os.path.join(runs, graph, row_name(job) + ".json")
        print(f"{row['run_id']}: {row['status']}: {write_row(path, row, args.restamp)}", flush=True)
    for job_id, same in repeats:
        print(f"{job_id}: measured again by a later campaign: {'the same allocated bytes in every phase' if same else 'DIFFERENT bytes'}")
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(summary(list(seen.values())))
        print(f"wrote {args.summary} ({len(seen)} measurements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
