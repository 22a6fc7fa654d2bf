"""Per-rank measurement of training strategies past one process, on CPU with the gloo backend:
torch's own DDP, ZeroRedundancyOptimizer (ZeRO-1), FSDP2 (`fully_shard`, reshard after forward
on and off), FSDP1 (FULL_SHARD and SHARD_GRAD_OP), tensor parallel (`parallelize_module`,
Colwise/Rowwise on attention and MLP) and pipeline parallel (`torch.distributed.pipelining`,
GPipe and 1F1B), one process per rank.

A run is one (graph, batch, strategy spec, world). Its ranks are `world` processes started
here (`python -m memcal_export.ranks --worker ...`), each with the harness's counting allocator
(`measure.py`), the store bound on 127.0.0.1 and gloo on the loopback interface (`lo`); every
process ends by itself (a run past `--timeout` seconds is killed, all its ranks, and recorded as
failed). Each rank runs the harness's protocol (`measure.py`: model_load, inputs, three steps of
forward, backward, optimizer; a pipeline's own, below) and its phases become one `memcal-run/1`
row with `rank` and `world`, under `data/runs/cpu-ranks/<graph>/b<batch>-<spec>-r<rank>.json`.

  - `plain` (world 1): the same model and protocol in one process, one thread: the baseline
    the strategies are compared with, written under `--work` (`plain/`), not as a row (the
    real-model campaign's rows of the regime cpu-real are the plain step's evidence).
  - `ddp:world=N`: `DistributedDataParallel(model)` (default buckets, 25 MiB), AdamW.
  - `zero1:world=N`: DDP + `ZeroRedundancyOptimizer(AdamW)`.
  - `fsdp:world=N,version=2,reshard=R`: `fully_shard` on every block (the model's
    `_no_split_modules` classes), then on the root, `reshard_after_forward=R`.
  - `fsdp:world=N,version=1,reshard=R`: FSDP1 with a `ModuleWrapPolicy` over the same blocks;
    R=1 is FULL_SHARD, R=0 SHARD_GRAD_OP.
  - `tp:k=N`: `parallelize_module` with Colwise on the attention's q/k/v and the MLP's input
    projections, Rowwise on their output projections (the family's plan in `TP_PLANS`); every
    rank is fed the same batch.
  - `pp:stages=S,micro=M,schedule=gpipe` and `pp:stages=S,micro=M,schedule=1f1b` (these keys
    in this order; world S): torch's `PipelineStage` with `ScheduleGPipe` or `Schedule1F1B`
    over M micro-batches, each rank one stage of the model cut by hand (`pipeline.py`: the
    whole model built with the one seed, its contiguous blocks kept, the rest freed within
    model_load). Its phases are model_load, inputs and per step `pipeline` (one
    `schedule.step`, every micro-batch's forward and backward: the schedule interleaves them
    in one call, so a step has no forward and backward phases) and `optimizer`. A pipeline the
    model or batch cannot form (`pipeline.refusal`) is refused before any rank starts and
    skipped, with its reason, in the campaign's list.

The batch of a row is what each rank is fed (per-rank micro-batch; for a pipeline the whole
batch, split into M micro-batches). AdamW as the harness (lr 1e-4, weight decay 0.01, foreach
off). One thread per rank.

A run already measured (its rows present) is skipped: the campaign resumes. A row never
overwrites a file.

Usage: python -m memcal_export.ranks --repo . --memcal target/release/memcal \
          [--runs data/runs/cpu-ranks] [--only GRAPH ...] [--strategy SPEC ...] [--dry-run]
          [--task I | --slurm DIR [--max-concurrent K] [--time T] [--partition P]]

`--slurm DIR` writes a Slurm array of the runs still to measure (one task a run, its ranks in
the task) and DIR/submit.sh; a task runs `--task I`, the selection's run I (exporter/README.md).
"""

import argparse
import datetime
import gc
import json
import os
import shlex
import socket
import subprocess
import sys
import time

from . import campaign as C
from . import measure as M

REGIME = "cpu-ranks"
TOOL = "memcal_export 0.1.0 (ranks)"
THREADS = 1

# Per graph: the measured-models entry it is built from, the batches, the tensor-parallel plan's
# family and the pipeline runs' batches.
# A family's batches run in turn with the others' (every family's first batch first); `extra`
# batches run only the specs named; `more` adds specs (of every world) to a batch's; `pp` batches
# run the pipeline specs (PP_SPECS) only, after every other run.
FAMILIES = {
    "hf-bert-base-cased": {"batches": [1], "tp": "bert", "pp": [2, 4]},
    "hf-mixtral-r1": {"batches": [1, 2], "tp": "mixtral", "pp": [2, 4, 8]},
    "hf-mistral-r1": {"batches": [1], "tp": "llama", "pp": [2, 4]},
    "hf-llama-r1": {"batches": [1, 2], "tp": "llama", "extra": {4: ["tp:"]}, "pp": [2, 4],
                    "more": {1: ["zero1:world={w},impl=deepspeed,bucket=10000000",
                                 "zero2:world={w},bucket=10000000", "zero3:world={w},bucket=10000000"]}},
    # Its lm_head is tied to the embeddings: every pipeline run is refused (pipeline.refusal).
    "hf-qwen3-r1": {"batches": [], "pp": [2]},
}

# Tensor-parallel plans per family: module path pattern -> "colwise" | "rowwise".
TP_PLANS = {
    "llama": {
        "model.layers.*.self_attn.q_proj": "colwise",
        "model.layers.*.self_attn.k_proj": "colwise",
        "model.layers.*.self_attn.v_proj": "colwise",
        "model.layers.*.self_attn.o_proj": "rowwise",
        "model.layers.*.mlp.gate_proj": "colwise",
        "model.layers.*.mlp.up_proj": "colwise",
        "model.layers.*.mlp.down_proj": "rowwise",
    },
    # Mixtral's experts are one fused parameter (not Linear): attention only.
    "mixtral": {
        "model.layers.*.self_attn.q_proj": "colwise",
        "model.layers.*.self_attn.k_proj": "colwise",
        "model.layers.*.self_attn.v_proj": "colwise",
        "model.layers.*.self_attn.o_proj": "rowwise",
    },
    "bert": {
        "encoder.layer.*.attention.self.query": "colwise",
        "encoder.layer.*.attention.self.key": "colwise",
        "encoder.layer.*.attention.self.value": "colwise",
        "encoder.layer.*.attention.output.dense": "rowwise",
        "encoder.layer.*.intermediate.dense": "colwise",
        "encoder.layer.*.output.dense": "rowwise",
    },
}

# The campaign: specs per world.
SPECS = [
    "ddp:world={w}",
    "zero1:world={w}",
    "fsdp:world={w},version=2,reshard=1",
    "fsdp:world={w},version=2,reshard=0",
    "fsdp:world={w},version=1,reshard=1",
    "fsdp:world={w},version=1,reshard=0",
    "tp:k={w}",
    "zero1:world={w},impl=deepspeed",
    "zero2:world={w}",
    "zero3:world={w}",
]
WORLDS = [2, 4]

# The pipeline specs, run at every family's `pp` batches where the model and the batch allow
# (pipeline.refusal: at most one stage a block, M dividing the batch, 1F1B with M >= S); at least
# two micro-batches (one is no pipeline: each stage idle while the other works).
PP_SPECS = [f"pp:stages={s},micro={m},schedule={k}" for k in ("gpipe", "1f1b") for s in (2, 4) for m in (2, 4)]


def parse_spec(spec):
    """`fsdp:world=2,version=2,reshard=1` -> ("fsdp", {"world": 2, ...}); `plain` -> ("plain", {});
    `pp:stages=2,micro=4,schedule=1f1b` -> ("pp", {"stages": 2, "micro": 4, "schedule": "1f1b"})
    (a value of digits a number, any other a name)."""
    head, _, rest = spec.partition(":")
    values = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        values[k] = int(v) if v.isdigit() else v
    return head, values


def world_of(spec):
    head, v = parse_spec(spec)
    return v.get("world") or v.get("k") or v.get("stages") or 1


def slug(spec):
    return spec.replace(":", "-").replace(",", "-").replace("=", "")


# ---------------------------------------------------------------------------------------------
# One rank (a worker process).


def block_classes(model):
    names = set(getattr(model, "_no_split_modules", None) or [])
    classes = {type(m) for m in model.modules() if type(m).__name__ in names}
    if not classes:
        raise RuntimeError(f"{type(model).__name__}: no `_no_split_modules` block class to shard by")
    return classes


def adamw(params):
    """The harness's optimizer (`measure.py`): AdamW, lr 1e-4, weight decay 0.01, foreach off."""
    import torch

    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=False)


def optimizer_step(opt):
    """The protocol's optimizer phase: a step, then the gradients freed."""
    opt.step()
    opt.zero_grad(set_to_none=True)


def wrap(model, spec, world, tp_plan, batch):
    """The model as the strategy runs it, and the optimizer over it (`tp_plan`: the family's
    entry of `TP_PLANS`, for `tp`; `batch`: each rank's, for DeepSpeed's configuration)."""
    import torch

    head, v = parse_spec(spec)
    if head == "plain":
        return model, adamw(model.parameters())
    if uses_deepspeed(spec):
        return deepspeed_engine(model, head, v, batch)
    if head in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model)
        if head == "ddp":
            return ddp, adamw(ddp.parameters())
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW,
                                      lr=1e-4, weight_decay=0.01, foreach=False)
        return ddp, opt
    if head == "fsdp" and v.get("version", 2) == 2:
        from torch.distributed.fsdp import fully_shard

        reshard = bool(v.get("reshard", 1))
        classes = block_classes(model)
        for m in list(model.modules()):
            if type(m) in classes:
                fully_shard(m, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        return model, adamw(model.parameters())
    if head == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        strategy = ShardingStrategy.FULL_SHARD if v.get("reshard", 1) else ShardingStrategy.SHARD_GRAD_OP
        fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy(block_classes(model)), sharding_strategy=strategy,
                    device_id=torch.device("cpu"))
        return fsdp, adamw(fsdp.parameters())
    if head == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (world,))
        plan = {k: ColwiseParallel() if s == "colwise" else RowwiseParallel() for k, s in tp_plan.items()}
        parallelize_module(model, mesh, plan)
        return model, adamw(model.parameters())
    if head == "pp":
        return model, None  # split into its stage, and its optimizer made, by measure_pp_rank
    raise ValueError(f"strategy `{spec}`: ranks.py measures plain, ddp, zero1, fsdp, tp and pp")


# DeepSpeed's ZeRO stage by spec head.
DS_STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}


def deepspeed_engine(model, head, v, batch):
    """DeepSpeed's engine over the model, fp32 (no fp16/bf16 section), the ZeRO stage of the spec
    with `reduce_bucket_size` = the spec's `bucket` where it gives one and every other setting
    DeepSpeed's default, and torch's AdamW as the client optimizer (DeepSpeed's CPUAdam is a C++
    extension, not built here). Returns (engine, its step as an optimizer); the backward is the
    engine's (`state["backward"]`, set by the caller)."""
    import deepspeed

    zero = {"stage": DS_STAGES[head]}
    if "bucket" in v:
        zero["reduce_bucket_size"] = v["bucket"]
    config = {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=adamw(model.parameters()), config=config)
    return engine, EngineStep(engine)


class EngineStep:
    """A DeepSpeed engine's `step` as the protocol's optimizer (the engine zeroes the gradients
    itself: `zero_grad` has nothing left to do)."""

    def __init__(self, engine):
        self.engine = engine

    def step(self):
        self.engine.step()

    def zero_grad(self, set_to_none=True):
        pass


def init_deepspeed(rank, world, port):
    """DeepSpeed's communication over the process group already made (gloo). DeepSpeed's
    shared-memory all-reduce (a C++ extension it compiles at start on CPU, used by inference's
    all-reduce only) is not built: every collective is gloo's."""
    import importlib

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed

    importlib.import_module("deepspeed.comm.torch")
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")


def uses_deepspeed(spec):
    head, v = parse_spec(spec)
    return head in ("zero2", "zero3") or v.get("impl") == "deepspeed"


def worker(args):
    counter = M.Counter(args.counter)
    import torch
    import torch.distributed as dist
    import transformers

    torch.set_num_threads(THREADS)
    job = json.loads(args.job)
    spec, world, rank = job["spec"], job["world"], args.rank
    if world > 1:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=job["timeout"]))
        if uses_deepspeed(spec):
            init_deepspeed(rank, world, job["port"])
    config, graph = job["config"], job["graph"]
    cls = getattr(transformers, C.CLASSES[config["model_type"]])
    fields = {k: val for k, val in config.items() if k != "model_type"}
    tp_plan = TP_PLANS.get(job.get("tp", ""), {})
    state = {}

    def build():
        m = cls(transformers.AutoConfig.for_model(config["model_type"], **fields))
        m.train()
        state["params"] = sum(p.numel() for p in m.parameters())
        wrapped, opt = wrap(m, spec, world, tp_plan, job["batch"])
        state["opt"] = opt
        if isinstance(opt, EngineStep):
            state["backward"] = opt.engine.backward
        return wrapped

    extra = {}
    if parse_spec(spec)[0] == "pp":
        phases, params, extra = measure_pp_rank(counter, build, state, graph, job["batch"], spec, rank, config)
    else:
        phases, params = measure_rank(counter, build, state, graph, job["batch"])
    out = {"phases": phases, "parameters": params, "torch": torch.__version__.split("+")[0],
           "library": f"transformers {transformers.__version__}",
           "class": C.CLASSES[config["model_type"]], **extra}
    with open(args.out, "w") as f:
        json.dump(out, f)
    if world > 1:
        dist.barrier()
        # Every rank has written its result and passed the barrier: the process ends here,
        # without the interpreter's teardown. Under load, torch's C++ teardown of the gloo group
        # and its threads at exit (destroy_process_group, then static destructors) now and then
        # aborts a rank ("terminate called without an active exception", exit -6) after its
        # work is done; nothing is left to release but the process itself.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def measure_rank(counter, build, state, graph, batch):
    """measure.py's protocol with the strategy's model and optimizer; every rank draws the same
    inputs (one seed), as tensor parallel needs and the data-parallel strategies allow (their
    memory does not depend on the tokens, an MoE's routing aside)."""
    import torch

    phases = []
    gc.collect()
    base, _ = counter.read()
    loss_of = C.loss_of(graph)

    def phase(name, f):
        M.run_phase(counter, base, phases, name, f)

    def load():
        torch.manual_seed(0)
        state["model"] = build()

    phase("model_load", load)
    torch.manual_seed(1)
    phase("inputs", lambda: state.__setitem__("inputs", C.make_inputs(graph, batch)))
    for k in range(1, M.STEPS + 1):
        phase(f"step{k}.forward", lambda: state.__setitem__("loss", loss_of(state["model"], state["inputs"])))
        backward = state.get("backward") or (lambda loss: loss.backward())
        phase(f"step{k}.backward", lambda: backward(state["loss"]))
        del state["loss"]
        phase(f"step{k}.optimizer", lambda: optimizer_step(state["opt"]))
    return phases, state["params"]


def measure_pp_rank(counter, build, state, graph, batch, spec, rank, config):
    """The protocol of a pipeline rank: model_load (the whole model built, its stage kept and the
    rest freed, the PipelineStage, the schedule, AdamW over the stage), inputs (every rank draws
    the whole batch, one seed), then per step `pipeline` (one `schedule.step`: every micro-batch's
    forward and backward, in the schedule's order) and `optimizer`. A step has no forward and
    backward phases: the schedule runs them inside the one call (1F1B the backward of the first
    micro-batches before the forward of the last), so no phase boundary falls between them.
    Returns the phases, the model's parameter count and what the rank's result adds: its stage
    (blocks, parameters, buffer bytes) and, on the last stage, each step's micro-batch losses."""
    import torch
    import torch.distributed as dist

    from . import pipeline as P

    stages, micro, schedule = P.parse(spec)
    crit = C.criterion(graph)
    if crit is None:
        raise RuntimeError(f"strategy `{spec}`: the graph's loss has no real counterpart")
    phases = []
    gc.collect()
    base, _ = counter.read()

    def phase(name, f):
        M.run_phase(counter, base, phases, name, f)

    def load():
        torch.manual_seed(0)
        module = P.split(build(), rank, stages)  # the other stages' modules go with the model
        gc.collect()
        state["module"] = module
        state["schedule"] = P.schedule_of(module, rank, stages, micro, schedule, crit[2], dist.group.WORLD)
        state["opt"] = adamw(module.parameters())

    phase("model_load", load)
    torch.manual_seed(1)
    phase("inputs", lambda: state.__setitem__("inputs", C.make_inputs(graph, batch)))
    args, target = P.stage_inputs(graph, state["inputs"], rank, stages, state["module"])
    losses = []
    for k in range(1, M.STEPS + 1):
        micro_losses = [] if rank == stages - 1 else None
        phase(f"step{k}.pipeline", lambda: P.step(state["schedule"], rank, stages, args, target, micro_losses))
        if micro_losses is not None:
            losses.append([loss.item() for loss in micro_losses])
        del micro_losses
        phase(f"step{k}.optimizer", lambda: optimizer_step(state["opt"]))
    module = state["module"]
    stage = {"index": rank, "blocks": list(P.shares(P.blocks_of(config), stages)[rank]),
             "parameters": sum(p.numel() for p in module.parameters()),
             "buffer_bytes": sum(b.numel() * b.element_size() for b in module.buffers())}
    return phases, state["params"], {"stage": stage, "losses": losses}


# ---------------------------------------------------------------------------------------------
# The campaign (the parent process).


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refusal(job):
    """Why the job cannot run (a sentence), or None: a pipeline the model or batch cannot form
    (`pipeline.refusal`)."""
    if parse_spec(job["spec"])[0] != "pp":
        return None
    from . import pipeline as P

    why = P.refusal(job["config"], job["spec"], job["batch"])
    if why is None and job["world"] != P.parse(job["spec"])[0]:
        why = f"`{job['spec']}` runs on {P.parse(job['spec'])[0]} ranks, not {job['world']}"
    return why


def run_job(counter_so, job, tmp, timeout):
    """Starts the job's ranks; returns (per-rank results, None) or (None, why it failed). A job
    that cannot run (`refusal`) raises ValueError before any rank starts."""
    why = refusal(job)
    if why:
        raise ValueError(why)
    world = job["world"]
    job = dict(job, port=free_port(), timeout=timeout)
    procs, outs = [], []
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1",
               DS_ACCELERATOR="cpu")
    for r in range(world):
        out = os.path.join(tmp, f"rank{r}.json")
        if os.path.exists(out):
            os.remove(out)
        outs.append(out)
        log = open(os.path.join(tmp, f"rank{r}.log"), "w")
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "memcal_export.ranks", "--worker", "--rank", str(r), "--job", json.dumps(job),
             "--counter", counter_so, "--out", out], stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.time() + timeout
    failed = None
    for p, log in procs:
        left = max(1, deadline - time.time())
        try:
            rc = p.wait(timeout=left)
            if rc != 0 and failed is None:
                failed = f"a rank exited {rc}"
        except subprocess.TimeoutExpired:
            failed = failed or f"past {timeout} s"
            break
    for p, log in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    if failed:
        tails = []
        for r in range(world):
            with open(os.path.join(tmp, f"rank{r}.log")) as f:
                lines = f.read().strip().splitlines()
            tails.append(f"rank {r}: " + " | ".join(lines[-3:]))
        return None, failed + "; " + " / ".join(tails)
    results = []
    for out in outs:
        with open(out) as f:
            results.append(json.load(f))
    return results, None


def row_of(result, job, rank, graph_path, graph_params, measured):
    """The real-model campaign's row (`campaign.stamp`) of one rank: this campaign's regime, run
    id, tool and thread count, and the strategy with the rank, world and backend after the
    regime."""
    entry = {"graph": job["graph_name"], "model": job["model"],
             **({"reduce": job["reduce"]} if job.get("reduce") else {})}
    stamped = C.stamp(dict(measured, phases=result["phases"], parameters=result["parameters"],
                           torch=result["torch"],
                           implementation={"library": result["library"], "class": result["class"],
                                           "config": f"models/{job['model']}/config.json",
                                           **({"reduced": job["reduce"]} if job.get("reduce") else {})}),
                      entry, job["batch"], graph_path, graph_params)
    spec = job["spec"]
    row = {}
    for k, v in stamped.items():
        row[k] = v
        if k == "regime":
            row[k] = REGIME
            if spec != "plain":
                row.update({"strategy": spec, "rank": rank, "world": job["world"], "backend": "gloo"})
    row["run_id"] = f"{REGIME}/{job['graph_name']}/b{job['batch']}/{spec}/rank{rank}"
    row["tool_version"] = TOOL
    row["device"]["cores"] = THREADS
    return row

def jobs(repo, only, specs):
    """The campaign's runs in order (every family's first batch first, the pipeline runs last);
    a run that cannot be formed (`refusal`) is skipped and said on stdout."""
    entries = {e["graph"]: e for e in C.load_spec(repo)}
    grid = ["plain"] + [s.format(w=w) for w in WORLDS for s in SPECS]
    turns = []
    for name, fam in FAMILIES.items():
        for i, batch in enumerate(fam["batches"]):
            more = [s.format(w=w) for w in WORLDS for s in fam.get("more", {}).get(batch, [])]
            turns.append(((0, i), name, batch, grid + more))
        for batch, prefixes in fam.get("extra", {}).items():
            turns.append(((0, len(fam["batches"])), name, batch,
                          [s for s in grid if any(s.startswith(p) for p in prefixes)]))
        for i, batch in enumerate(fam.get("pp", [])):
            turns.append(((1, i), name, batch, PP_SPECS))
    order = list(FAMILIES)
    turns.sort(key=lambda t: (t[0], order.index(t[1])))
    for _, name, batch, candidates in turns:
        fam = FAMILIES[name]
        if only and name not in only:
            continue
        entry = entries[name]
        with open(os.path.join(repo, "data", "graphs", name + ".json")) as f:
            graph = json.load(f)
        config = C.merged_config(repo, entry)
        heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
        for spec in candidates:
            if specs and not any(spec.startswith(s) for s in specs):
                continue
            if spec.startswith("tp:") and heads % world_of(spec) != 0:
                continue  # Colwise q/k/v need whole heads on every rank
            job = {
                "graph_name": name, "model": entry["model"], "reduce": entry.get("reduce"),
                "config": config, "graph": graph, "batch": batch,
                "spec": spec, "world": world_of(spec), "tp": fam.get("tp", ""),
            }
            why = refusal(job)
            if why:
                print(f"skip {name} b{batch}: {why}", flush=True)
                continue
            yield job


def row_path(runs, work, job, rank):
    if job["spec"] == "plain":
        return os.path.join(work, "plain", job["graph_name"], f"b{job['batch']}-plain.json")
    return os.path.join(runs, job["graph_name"], f"b{job['batch']}-{slug(job['spec'])}-r{rank}.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--counter", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--memcal", default="target/release/memcal")
    ap.add_argument("--runs", default=os.path.join("data", "runs", REGIME))
    ap.add_argument("--work", default=os.path.join("target", "ranks"), help="scratch folder (logs, the counter)")
    ap.add_argument("--only", nargs="*", default=[], help="graphs to measure (default: all of FAMILIES)")
    ap.add_argument("--strategy", nargs="*", default=[], help="spec prefixes to measure (default: all)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a run may take, all ranks")
    ap.add_argument("--dry-run", action="store_true", help="list the runs, measure nothing")
    ap.add_argument("--task", type=int, metavar="I",
                    help="measure the campaign's run I alone (its index in the full list the "
                         "selection gives, measured runs included: a Slurm array task's index); "
                         "nothing if its rows are there")
    ap.add_argument("--slurm", metavar="DIR",
                    help="write DIR/ranks.sbatch (a Slurm array, one task a run still to measure, "
                         "each task all the run's ranks on one node) and DIR/submit.sh; measure nothing")
    ap.add_argument("--max-concurrent", type=int, default=0, metavar="K",
                    help="with --slurm: at most K tasks at once (default: no limit)")
    ap.add_argument("--time", default="01:00:00", help="with --slurm: each task's time limit")
    ap.add_argument("--partition", help="with --slurm: the Slurm partition")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    repo = os.path.abspath(args.repo)
    args.memcal = os.path.abspath(args.memcal)
    every = list(jobs(repo, args.only, args.strategy))
    if args.task is not None and not 0 <= args.task < len(every):
        print(f"ranks: --task {args.task}: the selection has {len(every)} runs (0 to {len(every) - 1})",
              file=sys.stderr)
        return 2
    todo = [(i, j) for i, j in enumerate(every)
            if (args.task is None or i == args.task)
            and not all(os.path.exists(row_path(args.runs, args.work, j, r)) for r in range(j["world"]))]
    if args.slurm:
        return write_slurm(args, repo, every, todo)
    counter_so = None if args.dry_run else args.counter or M.build_counter(repo, os.path.join(repo, args.work))
    graph_params = {}
    failed = 0
    print(f"ranks: {len(todo)} runs to measure", flush=True)
    for i, (_, job) in enumerate(todo, 1):
        label = f"[{i}/{len(todo)}] {job['graph_name']} b{job['batch']} {job['spec']}"
        if args.dry_run:
            print(label, flush=True)
            continue
        gpath = os.path.join(repo, "data", "graphs", job["graph_name"] + ".json")
        if job["graph_name"] not in graph_params:
            graph_params[job["graph_name"]] = C.graph_parameters(args.memcal, repo, gpath)
        tmp = os.path.join(repo, args.work, "run")
        os.makedirs(tmp, exist_ok=True)
        t0 = time.time()
        measured = {"timestamp": C.now(), "device_name": C.cpu_name(), "capacity_bytes": C.host_memory(),
                    "host": socket.gethostname()}
        results, why = run_job(counter_so, job, tmp, args.timeout)
        if why:
            print(f"{label}: FAILED ({why})", flush=True)
            failed += 1
            continue
        for r, res in enumerate(results):
            row = row_of(res, job, r, gpath, graph_params[job["graph_name"]], measured)
            C.write_new(row_path(args.runs, args.work, job, r), row)
        peaks = [max(p["peak"] for p in res["phases"]) for res in results]
        print(f"{label}: {time.time() - t0:.0f} s, peaks per rank {peaks}", flush=True)
    # A campaign goes on past a failed run; one task (a Slurm array element) fails with it.
    return 1 if failed and args.task is not None else 0


def write_slurm(args, repo, every, todo):
    """`--slurm DIR`: a Slurm array over the runs still to measure, one task a run (its ranks
    are processes of the one task, on one node, so the store and gloo stay on the loopback),
    each task `--task I` with its own scratch folder; rows go straight to `--runs` (never
    overwritten, so a resubmitted campaign resumes). Returns the exit code."""
    out = os.path.abspath(args.slurm)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    if not todo:
        print(f"ranks: every run of the selection is measured ({len(every)}): nothing to submit", flush=True)
        return 0
    ids = ",".join(str(i) for i, _ in todo)
    limit = f"%{args.max_concurrent}" if args.max_concurrent > 0 else ""
    cpus = max(j["world"] for _, j in todo)
    sel = " --only " + " ".join(shlex.quote(g) for g in args.only) if args.only else ""
    sel += " --strategy " + " ".join(shlex.quote(s) for s in args.strategy) if args.strategy else ""
    # The counting allocator built once here, not by every task at once in one folder.
    so = M.build_counter(repo, os.path.join(repo, args.work))
    cmd = (f"{shlex.quote(sys.executable)} -m memcal_export.ranks --repo {shlex.quote(repo)}"
           f" --counter {shlex.quote(so)}"
           f" --memcal {shlex.quote(args.memcal)} --runs {shlex.quote(os.path.abspath(args.runs))}"
           f" --work {shlex.quote(os.path.abspath(args.work))}/task-$SLURM_ARRAY_TASK_ID"
           f" --timeout {args.timeout}{sel} --task $SLURM_ARRAY_TASK_ID")
    runs = "\n".join(f"#   {i}: {j['graph_name']} b{j['batch']} {j['spec']}" for i, j in todo)
    lines = [
        "#!/bin/bash",
        "# Slurm array job: one per-rank run a task, all its ranks in the task (one node).",
        "# Written by `python3 -m memcal_export.ranks --slurm`; regenerate rather than edit.",
        f"# {len(todo)} of the selection's {len(every)} runs still to measure; task I runs run I:",
        runs,
        "# To retry failed tasks only: sbatch --array=<ids> ranks.sbatch (a measured run is skipped).",
        "#SBATCH --job-name=memcal-ranks",
        f"#SBATCH --array={ids}{limit}",
        f"#SBATCH --output={out}/logs/%A_%a.out",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --chdir={repo}",
        f"#SBATCH --time={args.time}",
    ]
    if args.partition:
        lines.append(f"#SBATCH --partition={args.partition}")
    lines += [
        "set -euo pipefail",
        f"export PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))}",
        f"exec {cmd}",
        "",
    ]
    with open(os.path.join(out, "ranks.sbatch"), "w") as f:
        f.write("\n".join(lines))
    submit = os.path.join(out, "submit.sh")
    with open(submit, "w") as f:
        f.write("\n".join([
            "#!/usr/bin/env bash",
            "# Submits the per-rank campaign's array (ranks.sbatch). Usage: submit.sh [--wait].",
            "# --wait: waits for every task (sbatch --wait) and exits 1 if one failed.",
            "set -euo pipefail",
            f"here={shlex.quote(out)}",
            'case "${1:-}" in --wait|"") ;; *) echo "usage: $0 [--wait]" >&2; exit 2 ;; esac',
            'sbatch ${1:+--wait} "$here/ranks.sbatch"',
            "",
        ]))
    os.chmod(submit, 0o755)
    print(f"ranks: {len(todo)} runs as Slurm array tasks {ids}{limit}, {cpus} CPUs a task: "
          f"{out}/ranks.sbatch; submit with {submit} [--wait]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
