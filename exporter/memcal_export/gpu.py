"""The GPU campaign of real implementations: transformers classes at 1-8B parameters built on the
device from `data/models/<model>/config.json` (random weights, no download), measured with the
CUDA caching allocator's own statistics (allocated and reserved, per phase) under the harness's
protocol (`measure.py`, `measurement/src/protocol.rs`), under several allocator settings and at
emulated capacities near their peaks; `generate` with dynamic and static KV caches; LoRA over a
bf16 base. `--dry-run` runs the same code paths on the CPU at tiny sizes (CI).

The plan is `measurement/campaigns/gpu-real.json` (format `memcal-gpu-plan/1`, fields below). The
driver orders its jobs so that a campaign cut short still covers every part (`wave` 1 holds one
job of each part), and runs each maximal run of jobs under one allocator setting in a worker
process started with that `PYTORCH_CUDA_ALLOC_CONF` (the allocator reads it once, at the first
CUDA call). Each job writes one measurement `<out>/raw/<id>.json` the moment it ends; a job whose
file exists is not run again (resumable). `memcal_export.gpu_stamp` turns measurements into
`memcal-run/1` rows against the graphs `memcal import hf` draws from the same configs.

Kinds of job:
  train     three AdamW steps (lr 1e-4, weight decay 0.01, foreach=False like the C++ AdamW that
            the harness runs), phases model_load, inputs, stepK.forward/backward/optimizer;
            precision `bf16-autocast` (float32 weights, bf16 autocast around forward and loss)
            or `bf16` (weights, gradients and AdamW states in bfloat16)
  generate  bf16 weights, no gradients: phases model_load, inputs, prefill (generate of one new
            token, which fills the cache), decode (generate of `decode` more tokens from it);
            cache `dynamic` (transformers' default) or `static` (cache_implementation="static")
  lora      peft LoRA of rank `rank` on every linear projection of a bf16 base (adapters in
            float32, peft's default), trained like `train` under bf16 autocast

Plan fields: `seq`; `allocators` (name -> PYTORCH_CUDA_ALLOC_CONF value); `jobs`, each with
`kind`, `model`, `batches`, optional `precisions` (train), `allocators` (default ["default"]),
`caps` (factors of the same job's reserved peak under the default allocator: a job at an
emulated capacity, applied with torch.cuda.set_per_process_memory_fraction), `caches`, `prompt`,
`decode` (generate), `rank` (lora), `wave` (1 = run first), `seq` (overrides the plan's);
`dry_run`: `reduce` (config fields replaced), `seq`, `prompt`, `decode`, `max_batch`.

Usage: python -m memcal_export.gpu --repo . --plan PLAN --out DIR [--budget-s S] [--dry-run]
"""

import argparse
import gc
import glob
import json
import os
import socket
import subprocess
import sys
import time

from .campaign import CLASSES, cpu_name, host_memory, now

PLAN_FORMAT = "memcal-gpu-plan/1"
RAW_FORMAT = "memcal-gpu-measurement/1"
STEPS = 3
LR = 1e-4
WEIGHT_DECAY = 0.01


# ---------------------------------------------------------------------------------------------
# The plan


def load_plan(path):
    with open(path) as f:
        plan = json.load(f)
    if plan.get("format") != PLAN_FORMAT:
        raise SystemExit(f"{path}: field `format` must be {PLAN_FORMAT}")
    for i, j in enumerate(plan["jobs"]):
        if j.get("kind") not in ("train", "generate", "lora"):
            raise SystemExit(f"{path}: jobs[{i}].kind must be train, generate or lora")
        for a in j.get("allocators", ["default"]):
            if a not in plan["allocators"]:
                raise SystemExit(f"{path}: jobs[{i}].allocators names `{a}`, not in `allocators`")
    return plan


def expand(plan, dry_run):
    """Every job of the plan, in the order the campaign runs them (wave, then plan order)."""
    dry = plan.get("dry_run", {})
    out, seen = [], set()
    for j in plan["jobs"]:
        seq = dry.get("seq", 32) if dry_run else j.get("seq", plan["seq"])
        batches = j["batches"]
        if dry_run:
            batches = sorted({min(b, dry.get("max_batch", 2)) for b in batches})
        for alloc in j.get("allocators", ["default"]):
            for prec in j.get("precisions", ["bf16"] if j["kind"] == "generate" else ["bf16-autocast"]):
                for cache in j.get("caches", [None]):
                    for b in batches:
                        base = {
                            "kind": j["kind"], "model": j["model"], "precision": prec, "batch": b,
                            "seq": seq, "allocator": alloc, "wave": j.get("wave", 2),
                        }
                        if j["kind"] == "generate":
                            base["prompt"] = dry.get("prompt", 16) if dry_run else j["prompt"]
                            base["decode"] = dry.get("decode", 4) if dry_run else j["decode"]
                            base["cache"] = cache
                            base.pop("seq")
                        if j["kind"] == "lora":
                            base["rank"] = j["rank"]
                        base["id"] = job_id(base)
                        if base["id"] not in seen:  # a job two plan entries name runs once
                            seen.add(base["id"])
                            out.append(base)
                        for f in j.get("caps", []) if alloc == "default" else []:
                            capped = dict(base, cap_factor=f, cap_of=base["id"])
                            capped["id"] = job_id(capped)
                            out.append(capped)
    # Within a wave, one allocator setting after another (one worker process each), plan
    # order within a setting (a capped job after the job it is capped against).
    order = {name: i for i, name in enumerate(plan["allocators"])}
    out.sort(key=lambda j: (j["wave"], order[j["allocator"]]))
    return out


def job_id(j):
    parts = [j["kind"], j["model"], j["precision"], f"b{j['batch']}"]
    if j["kind"] == "generate":
        parts += [f"p{j['prompt']}", f"d{j['decode']}", j["cache"]]
    else:
        parts.append(f"s{j['seq']}")
    if j["kind"] == "lora":
        parts.append(f"r{j['rank']}")
    parts.append(j["allocator"])
    if "cap_factor" in j:
        parts.append(f"cap{j['cap_factor']}")
    return "__".join(parts)


# ---------------------------------------------------------------------------------------------
# Memory readers


class CudaMemory:
    """The CUDA caching allocator's own statistics of device 0."""

    kind = "cuda"

    def __init__(self):
        import torch

        self.torch = torch
        torch.cuda.init()
        self.total = torch.cuda.get_device_properties(0).total_memory

    def read(self):
        s = self.torch.cuda.memory_stats(0)
        return (s.get("allocated_bytes.all.current", 0), s.get("allocated_bytes.all.peak", 0),
                s.get("reserved_bytes.all.current", 0), s.get("reserved_bytes.all.peak", 0))

    def reset_peak(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats(0)

    def sync(self):
        self.torch.cuda.synchronize()

    def set_cap(self, cap_bytes):
        self.torch.cuda.set_per_process_memory_fraction(min(1.0, cap_bytes / self.total) if cap_bytes else 1.0, 0)

    def clear(self):
        """Back to an empty allocator between jobs: cuBLAS workspaces (held by the caching
        allocator per handle) released, every cached segment returned."""
        gc.collect()
        self.torch.cuda.synchronize()
        clear = getattr(self.torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear:
            clear()
        self.torch.cuda.empty_cache()
        self.torch.cuda.reset_peak_memory_stats(0)

    def device(self):
        p = self.torch.cuda.get_device_properties(0)
        return {"kind": "cuda", "name": p.name, "capacity_bytes": p.total_memory,
                "allocator": "cuda-caching-allocator", "reserved_equals_allocated": False,
                "torch": self.torch.__version__.split("+")[0], "cuda": self.torch.version.cuda,
                "driver": driver_version(), "cores": os.cpu_count()}


class CpuMemory:
    """The dry run's reader: the harness's exact counting CPU allocator (reserved = allocated)."""

    kind = "cpu"

    def __init__(self, repo, build_dir):
        from . import measure as M

        self.counter = M.Counter(M.build_counter(repo, build_dir))
        self.total = host_memory()

    def read(self):
        cur, peak = self.counter.read()
        return cur, peak, cur, peak

    def reset_peak(self):
        self.counter.reset_peak()

    def sync(self):
        pass

    def set_cap(self, cap_bytes):
        self.counter.lib.memcal_cpu_set_cap(__import__("ctypes").c_uint64(cap_bytes or 0))

    def clear(self):
        gc.collect()
        self.counter.reset_peak()

    def device(self):
        import torch

        return {"kind": "cpu", "name": cpu_name(), "capacity_bytes": self.total,
                "allocator": "cpu-counting-allocator", "reserved_equals_allocated": True,
                "torch": torch.__version__.split("+")[0], "cores": os.cpu_count()}


def is_oom(exc):
    text = str(exc)
    return (type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text
            or "not enough memory" in text or "_STATUS_ALLOC_FAILED" in text)


class Recorder:
    """Runs phases, reading the allocator around each; stops at the first failed phase."""

    def __init__(self, mem):
        self.mem = mem
        self.phases = []
        self.failure = None

    def phase(self, name, f):
        if self.failure:
            return None
        self.mem.sync()
        a0, _, r0, _ = self.mem.read()
        self.mem.reset_peak()
        t0 = time.perf_counter()
        status, value = "ok", None
        try:
            value = f()
            self.mem.sync()
        except Exception as e:  # noqa: BLE001 - every failure is recorded, never dropped
            status = "oom" if is_oom(e) else "error"
            self.failure = {"status": status, "phase": name, "message": str(e).split("\n")[0][:500]}
        wall = time.perf_counter() - t0
        a1, ap, r1, rp = self.mem.read()
        self.phases.append({
            "name": name, "status": status,
            "allocated_start": a0, "reserved_start": r0,
            "allocated_peak": max(ap, a0, a1), "reserved_peak": max(rp, r0, r1),
            "allocated_end": a1, "reserved_end": r1, "wall_seconds": wall,
        })
        return value


# ---------------------------------------------------------------------------------------------
# Jobs


def model_config(repo, model, dry):
    with open(os.path.join(repo, "data", "models", model, "config.json")) as f:
        config = json.load(f)
    if dry is not None:
        config.update(dry.get("reduce", {}))
        if config.get("model_type") == "gemma":
            config["num_key_value_heads"] = 1
    return config


def build(config, dtype, device):
    import torch
    import transformers

    model_type = config["model_type"]
    if model_type not in CLASSES:
        raise ValueError(f"model_type `{model_type}`: the GPU campaign builds {', '.join(sorted(CLASSES))}")
    cls = getattr(transformers, CLASSES[model_type])
    fields = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype", "dtype", "architectures", "transformers_version")}
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            m = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    return m, CLASSES[model_type]


def run_train(job, config, mem, device, lora=False):
    import torch
    import torch.nn.functional as F

    rec = Recorder(mem)
    st = {}
    autocast = job["precision"] == "bf16-autocast" or lora
    wdtype = torch.bfloat16 if (job["precision"] == "bf16" or lora) else torch.float32

    def load():
        torch.manual_seed(0)
        st["model"], st["class"] = build(config, wdtype, device)
        st["model"].train()
        if lora:
            import peft

            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
            lc = peft.LoraConfig(r=job["rank"], lora_alpha=2 * job["rank"], lora_dropout=0.0, target_modules=targets)
            st["model"] = peft.get_peft_model(st["model"], lc)
            st["adapters"] = sum(p.numel() for p in st["model"].parameters() if p.requires_grad)
        params = [p for p in st["model"].parameters() if p.requires_grad]
        st["opt"] = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, foreach=False)

    rec.phase("model_load", load)
    vocab = config["vocab_size"]
    rec.phase("inputs", lambda: st.update(
        tokens=torch.randint(vocab, (job["batch"], job["seq"]), device=device),
        labels=torch.randint(vocab, (job["batch"], job["seq"]), device=device)))
    for k in range(1, STEPS + 1):
        def forward():
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
                logits = st["model"](input_ids=st["tokens"], use_cache=False).logits
                st["loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), st["labels"].reshape(-1))
        rec.phase(f"step{k}.forward", forward)
        rec.phase(f"step{k}.backward", lambda: st["loss"].backward())
        st.pop("loss", None)

        def step():
            st["opt"].step()
            st["opt"].zero_grad(set_to_none=True)
        rec.phase(f"step{k}.optimizer", step)
    extra = {"adapter_parameters": st["adapters"]} if "adapters" in st else {}
    return rec, st, extra


def run_generate(job, config, mem, device):
    import torch

    rec = Recorder(mem)
    st = {}

    def load():
        torch.manual_seed(0)
        st["model"], st["class"] = build(config, torch.bfloat16, device)
        st["model"].eval()

    rec.phase("model_load", load)
    vocab = config["vocab_size"]
    rec.phase("inputs", lambda: st.update(
        tokens=torch.randint(vocab, (job["batch"], job["prompt"]), device=device)))
    # min_new_tokens masks the end-of-sequence token, so every job decodes all its tokens;
    # disable_compile keeps transformers from compiling the forward for a static cache.
    kw = {"do_sample": False, "return_dict_in_generate": True, "pad_token_id": 0, "disable_compile": True}

    def prefill():
        st["cache"] = make_cache(job["cache"], st["model"], job["prompt"] + job["decode"], job["batch"], device)
        with torch.no_grad():
            out = st["model"].generate(st["tokens"], past_key_values=st["cache"], max_new_tokens=1,
                                       min_new_tokens=1, **kw)
        st["sequences"] = out.sequences

    def decode():
        with torch.no_grad():
            out = st["model"].generate(st["sequences"], past_key_values=st["cache"],
                                       max_new_tokens=job["decode"], min_new_tokens=job["decode"], **kw)
        st["sequences"] = out.sequences

    rec.phase("prefill", prefill)
    rec.phase("decode", decode)
    return rec, st, {}


def make_cache(kind, model, length, batch, device):
    """transformers' DynamicCache, or a StaticCache sized for the whole generation (prompt +
    decode tokens), as people size it; the constructor's arguments differ by version."""
    import inspect

    import torch
    import transformers

    if kind == "dynamic":
        return transformers.DynamicCache()
    cls = transformers.StaticCache
    params = inspect.signature(cls.__init__).parameters
    kw = {"config": model.config, "max_cache_len": length}
    for name, value in (("max_batch_size", batch), ("device", device), ("dtype", torch.bfloat16)):
        if name in params:
            kw[name] = value
    return cls(**kw)


def run_job(job, repo, mem, device, dry, results):
    config = model_config(repo, job["model"], dry)
    cap = None
    if "cap_factor" in job:
        ref = results.get(job["cap_of"])
        if not ref or ref["status"] != "completed":
            return None  # the reference run did not complete: nothing to cap against
        cap = int(job["cap_factor"] * max(p["reserved_peak"] for p in ref["phases"]))
    mem.clear()
    mem.set_cap(cap)
    t0 = time.perf_counter()
    try:
        if job["kind"] == "generate":
            rec, st, extra = run_generate(job, config, mem, device)
        else:
            rec, st, extra = run_train(job, config, mem, device, lora=job["kind"] == "lora")
        params = sum(p.numel() for p in st["model"].parameters()) if "model" in st else None
        cls = st.get("class")
    finally:
        st = None
        mem.clear()
        mem.set_cap(None)
    import transformers

    row = {
        "format": RAW_FORMAT, "job": job, "config": config,
        "timestamp": now(),
        "host": socket.gethostname(), "device": mem.device(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "emulated_capacity_bytes": cap,
        "implementation": {"library": f"transformers {transformers.__version__}", "class": cls,
                           "config": f"models/{job['model']}/config.json",
                           **({"reduced": dry.get("reduce", {})} if dry is not None else {})},
        "parameters": params, "seconds": time.perf_counter() - t0,
        "status": rec.failure["status"] if rec.failure else "completed",
        "phases": rec.phases, **extra,
    }
    if rec.failure:
        row[rec.failure["status"]] = {"phase": rec.failure["phase"], "message": rec.failure["message"]}
    return row


# ---------------------------------------------------------------------------------------------
# Driver and worker


def worker(args):
    with open(args.jobs) as f:
        jobs = json.load(f)
    dry = load_plan(args.plan).get("dry_run", {}) if args.dry_run else None
    if args.dry_run:
        mem, device = CpuMemory(args.repo, os.path.join(args.out, "build")), "cpu"
        import torch

        torch.set_num_threads(2)
    else:
        mem, device = CudaMemory(), "cuda"
    raw = os.path.join(args.out, "raw")
    results = {}
    for name in os.listdir(raw):
        with open(os.path.join(raw, name)) as f:
            r = json.load(f)
        results[r["job"]["id"]] = r
    for job in jobs:
        path = os.path.join(raw, job["id"] + ".json")
        if os.path.exists(path):
            continue
        try:
            row = run_job(job, args.repo, mem, device, dry, results)
        except Exception as e:  # noqa: BLE001 - a failure outside the phases: said, not fatal
            print(f"  {job['id']}: failed outside its phases: {str(e).splitlines()[0][:300]}", flush=True)
            continue
        if row is None:
            print(f"  {job['id']}: skipped (its reference run did not complete)", flush=True)
            continue
        results[job["id"]] = row
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(row, f, indent=1)
        os.replace(tmp, path)
        peak = max(p["allocated_peak"] for p in row["phases"])
        rpeak = max(p["reserved_peak"] for p in row["phases"])
        print(f"  {job['id']}: {row['status']}, allocated peak {peak / 2**30:.2f} GiB, reserved {rpeak / 2**30:.2f} GiB, {row['seconds']:.1f} s", flush=True)
    return 0


def segments(jobs):
    """Maximal runs of consecutive jobs under one allocator setting."""
    out = []
    for j in jobs:
        if out and out[-1][0] == j["allocator"]:
            out[-1][1].append(j)
        else:
            out.append((j["allocator"], [j]))
    return out


def driver(args):
    plan = load_plan(args.plan)
    jobs = expand(plan, args.dry_run)
    raw = os.path.join(args.out, "raw")
    os.makedirs(raw, exist_ok=True)
    started = time.time()
    todo = [j for j in jobs if not os.path.exists(os.path.join(raw, j["id"] + ".json"))]
    print(f"gpu campaign: {len(jobs)} jobs, {len(jobs) - len(todo)} already measured; budget {args.budget_s} s", flush=True)
    for n, (alloc, seg) in enumerate(segments(todo)):
        left = args.budget_s - (time.time() - started)
        if left < 5:
            print(f"gpu campaign: budget spent; {sum(len(s) for _, s in segments(todo)[n:])} jobs left for a rerun", flush=True)
            break
        path = os.path.join(args.out, f"segment-{n}.json")
        with open(path, "w") as f:
            json.dump(seg, f)
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=plan["allocators"][alloc])
        if not env["PYTORCH_CUDA_ALLOC_CONF"]:
            env.pop("PYTORCH_CUDA_ALLOC_CONF")
        print(f"segment {n}: {len(seg)} jobs under allocator `{alloc}` ({plan['allocators'][alloc] or 'defaults'})", flush=True)
        cmd = [sys.executable, "-m", "memcal_export.gpu", "--worker", "--jobs", path, "--repo", args.repo,
               "--plan", args.plan, "--out", args.out] + (["--dry-run"] if args.dry_run else [])
        try:
            rc = subprocess.run(cmd, env=env, timeout=left).returncode
        except subprocess.TimeoutExpired:
            print("gpu campaign: budget spent inside a segment", flush=True)
            break
        if rc != 0:
            print(f"segment {n}: worker exited {rc} (its finished jobs are kept; the rest run on a rerun)", flush=True)
    done = sum(os.path.exists(os.path.join(raw, j["id"] + ".json")) for j in jobs)
    print(f"gpu campaign: {done} of {len(jobs)} jobs measured, {time.time() - started:.0f} s", flush=True)
    # The dry run (CI) must measure every job; on a GPU a cut-short campaign is resumed instead.
    return 1 if args.dry_run and done < len(jobs) else 0


# Seconds a worker process takes to start (python, torch, transformers, CUDA context) before its
# first job: the first job of each segment of the shipped campaigns took this much longer than
# the same kind of job later in a segment (data/gpu/2026-12-04-h200: 10-14 s).
SEGMENT_START_S = 12.0


def estimate(plan, shipped_root):
    """The plan's running time from shipped measurements: each job's own seconds where the same
    job was measured, else the median of its kind's jobs, plus a worker start per segment."""
    import statistics

    seconds, by_kind = {}, {}
    for path in sorted(glob.glob(os.path.join(shipped_root, "*", "real-*", "*.json"))):
        with open(path) as f:
            m = json.load(f)
        seconds.setdefault(m["job"]["id"], m["seconds"])
        by_kind.setdefault(m["job"]["kind"], []).append(m["seconds"])
    if not by_kind:
        raise SystemExit(f"{shipped_root}: no shipped measurements to estimate from")
    median = {k: statistics.median(v) for k, v in by_kind.items()}
    jobs = expand(plan, False)
    total = sum(seconds.get(j["id"], median.get(j["kind"], max(median.values()))) for j in jobs)
    known = sum(j["id"] in seconds for j in jobs)
    return total + SEGMENT_START_S * len(segments(jobs)), len(jobs), known


def driver_version():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--plan", default=os.path.join("measurement", "campaigns", "gpu-real.json"))
    ap.add_argument("--out", help="folder of the measurements (required unless --list)")
    ap.add_argument("--budget-s", type=float, default=360)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, the same code paths")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true", help="print the jobs in campaign order and exit")
    ap.add_argument("--estimate", metavar="SHIPPED", help="print the plan's running time estimated from the measurements under SHIPPED (data/gpu) and exit")
    args = ap.parse_args(argv)
    if args.estimate:
        total, n, known = estimate(load_plan(args.plan), args.estimate)
        print(f"{args.plan}: {n} jobs ({known} measured before), about {total:.0f} s of GPU time "
              f"with {SEGMENT_START_S:.0f} s per worker start (budget: --budget-s, default 360)")
        return 0
    if args.list:
        for j in expand(load_plan(args.plan), args.dry_run):
            print(j["id"])
        return 0
    if not args.out:
        ap.error("--out is required")
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
