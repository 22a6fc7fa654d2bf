#!/usr/bin/env python3
"""Writes the CPU campaign plans (cpu-free.toml, cpu-edge.toml, cpu-after-fit.toml) next to this
file. Batches are chosen with the planner itself (`memcal plan --json`, fp32): for cpu-free the
batches whose estimate lands near 1.2, 2.0 and 2.8 GB (x0.4 for the slow recurrent families); for cpu-edge the batches whose estimate
lands near 1.6x and 2.4x each emulated capacity, so that some runs go over it on purpose. The
SEED factors over-estimate CPU float32 peaks about twofold (the first bert rows measured 0.5x to
0.6x their estimate), hence the scaling: the measured peaks land near 0.8 to 1.8 GB and around
the caps. For after-the-fit, batches no earlier row has. Reproducible: same graphs and factors give the same plans.

The committed plans were generated with the seed factors, before the fit:
  git show 3dabde2:data/factors.json > /tmp/seed.json
  measurement/campaigns/make_plans.py --factors /tmp/seed.json
cpu-edge-2.toml (r1 and r3 expected over the 2 GiB cap) was measured after the fit: its rows are
held out by regime and never fitted, so they change no factor.

Third round (cpu-round3.toml, `--round3`), measured before the second fit and generated with the
factors of the first fit (fixed 2026-11-29T19:05:29Z, `git show 87d79af:data/factors.json`), which
estimate CPU float32 peaks without the seed's twofold margin, so targets are in real GB: every r2
variant uncapped (cpu-free) at a batch no earlier row has, and the 4 and 8 GiB caps with batches
just under (0.85x) and over (1.3x) them, which the first rounds barely covered (4 GiB) or not at
all (8 GiB).
  git show 87d79af:data/factors.json > /tmp/fit1.json
  measurement/campaigns/make_plans.py --round3 --factors /tmp/fit1.json

After the second fit (`--after2`, cpu-after-fit-2.toml, generated with the factors it fixed):
uncapped runs marked after-fit at a (variant, batch) that no row on disk has, r1 and r3 of every
family near 1.5 GB (x0.5 for the slow recurrent families).
  measurement/campaigns/make_plans.py --after2

GPU (`--gpu`, cuda.toml): bf16 autocast on one CUDA card, generated with the factors in force
(bf16 still the seed's). Every family twice (its full-size graph and its r3, or r1 and r3 where the
full size does not fit one card), uncapped (cuda-free) at batches whose estimate lands near 4, 12
and 32 GB, and capped (cuda-edge) at 16 GiB on one graph and 40 GiB on the other, just under
(0.85x) and over (1.3x) the cap. Ordered in tiers so that a campaign cut short covers every family.
  measurement/campaigns/make_plans.py --gpu
After the GPU fit (`--gpu-after`, cuda-after-fit.toml, generated with the factors it fixed): every
run marked after-fit, at a (graph, batch) no row on disk has: each GPU graph uncapped near 8, 20
and 45 GB, and at its cap (16 GiB on the first graph of a family, 40 GiB on the second) near 0.9x
and 1.15x of it.

Usage: measurement/campaigns/make_plans.py [--memcal target/debug/memcal] [--factors FILE] [--round3 | --after2 | --gpu | --gpu-after]
"""
import argparse
import json
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GIB = 2**30


PRECISION = "fp32"
MAX_BATCH = 4096


def estimate(memcal, graph, batch, factors):
    out = subprocess.run(
        [memcal, "plan", str(graph), "--batch", str(batch), "--precision", PRECISION,
         "--factors", str(factors), "--json"],
        check=True, capture_output=True, text=True).stdout
    # The six-factor plan's estimate (memcal-plan/3 keeps it under `six_factor`; the top level
    # holds the deciding method's): the campaigns are sized by the factors being fitted.
    return json.loads(out)["six_factor"]["estimate_bytes"]


def batch_for(memcal, graph, target, factors, cache):
    """Largest batch whose estimate is at or under target (at least 1), by doubling + bisection."""
    def est(b):
        if b not in cache:
            cache[b] = estimate(memcal, graph, b, factors)
        return cache[b]
    if est(1) >= target:
        return 1
    lo, hi = 1, 2
    while est(hi) < target and hi < MAX_BATCH:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if est(mid) < target:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memcal", default=str(ROOT / "target/debug/memcal"))
    ap.add_argument("--factors", default=str(ROOT / "data/factors.json"))
    ap.add_argument("--round3", action="store_true", help="write only cpu-round3.toml")
    ap.add_argument("--after2", action="store_true", help="write only cpu-after-fit-2.toml")
    ap.add_argument("--gpu", action="store_true", help="write only cuda.toml (bf16 autocast)")
    ap.add_argument("--gpu-after", action="store_true", help="write only cuda-after-fit.toml")
    args = ap.parse_args()
    if args.gpu or args.gpu_after:
        return gpu(args)
    if args.round3:
        return round3(args)
    if args.after2:
        return after2(args)
    # A 2-core machine measures about 30 s per GB of peak (LSTM/GRU families about 120 s): the
    # plan is sized to finish in about 80 minutes and ordered in tiers (every variant's smallest
    # batch first, then the medium, then the largest), so that a campaign cut short still covers
    # every family. Variants r1 and r3 of every family run uncapped (cpu-free); r2 runs around
    # the 2 GiB cap and r3 over the 4 GiB cap (cpu-edge); after the fit, r2 and r1 run uncapped at
    # batches no earlier row has.
    slow = ("lstm-lm", "gru", "cnn-lstm")
    graphs = sorted((ROOT / "data/graphs").glob("*-r[0-9].json"))
    free_tiers = [[], [], []]
    more_tiers = [[], []]
    edge_more = []
    edge_tiers = [[], [], []]
    after = []
    for g in graphs:
        rel = g.relative_to(ROOT)
        cache = {}
        family, variant = rel.stem.rsplit("-", 1)
        scale = 0.4 if family in slow else 1.0
        est_batch = lambda target: batch_for(args.memcal, g, target, args.factors, cache)
        if variant in ("r1", "r3"):
            fb = []
            for t in (1.2, 2.0, 2.8):
                b = est_batch(t * scale * 1e9)
                fb.append(b if not fb or b > fb[-1] else fb[-1] + 1)
            for tier, b in enumerate(fb):
                free_tiers[tier].append((rel, [b], []))
            # A second round, larger (measured peaks mostly above 1 GB), run once the first
            # round is done: cpu-more.toml.
            for tier, t in enumerate((3.6, 4.4)):
                b = est_batch(t * scale * 1e9)
                while b in fb:
                    b += 1
                fb.append(b)
                more_tiers[tier].append((rel, [b], [], "cpu-free"))
            # Edge, second round (cpu-edge-2.toml): r1 and r3 expected over the 2 GiB cap.
            edge_more.append((rel, [est_batch(2.4 * 2 * GIB * scale)], [2], "cpu-edge"))
            if variant == "r1":
                gap = [b for b in range(fb[0] + 1, fb[1]) if b not in fb]
                if gap:
                    after.append((rel, [gap[len(gap) // 2]], []))
        if variant == "r2":
            # 2 GiB: one batch expected just under the cap and one just over it.
            lo = est_batch(1.6 * 2 * GIB * scale)
            hi = max(est_batch(2.4 * 2 * GIB * scale), lo + 1)
            edge_tiers[0].append((rel, [lo], [2]))
            edge_tiers[1].append((rel, [hi], [2]))
            # After the fit: r2 uncapped at a batch no capped row has.
            a = est_batch(1.4e9 * scale)
            after.append((rel, [a if a not in (lo, hi) else a + 1], []))
        if variant == "r3":
            # 4 GiB: expected over the cap.
            edge_tiers[2].append((rel, [est_batch(2.4 * 4 * GIB * scale)], [4]))
    # One plan, interleaved: free tier 0, edge tier 0, free tier 1, ...; each entry names its regime.
    # The recurrent families take about two minutes per run whatever the batch (the sequential
    # LSTM/GRU loop over long sequences): they go last, so the other families are covered first.
    cpu, last = [], []
    for f, e in zip(free_tiers, edge_tiers):
        for (r, b, c), regime in [(x, "cpu-free") for x in f] + [(x, "cpu-edge") for x in e]:
            family = r.stem.rsplit("-", 1)[0]
            (last if family in slow else cpu).append((r, b, c, regime))
    cpu += last
    after.sort(key=lambda e: e[0].stem.rsplit("-", 1)[0] in slow)

    def write(name, header, entries):
        lines = [f"# Generated by measurement/campaigns/make_plans.py; re-run it to regenerate.\n{header}\n"]
        for entry in entries:
            rel, batches, caps = entry[:3]
            lines.append("[[run]]")
            lines.append(f'graph = "{rel}"')
            lines.append(f"batches = {json.dumps(batches)}")
            if caps:
                lines.append(f"caps = {json.dumps(caps)}")
            if len(entry) > 3:
                lines.append(f'regime = "{entry[3]}"')
            lines.append("")
        (HERE / name).write_text("\n".join(lines))
        n = sum(len(e[1]) * max(1, len(e[2])) for e in entries)
        print(f"{name}: {n} runs")

    write("cpu.toml", 'device = "cpu"\nprecision = "fp32"\n', cpu)
    write("cpu-edge-2.toml", 'device = "cpu"\nprecision = "fp32"\n', edge_more)
    write("cpu-more.toml", 'device = "cpu"\nprecision = "fp32"\n', [e for t in more_tiers for e in t])
    write("cpu-after-fit.toml", 'device = "cpu"\nprecision = "fp32"\nregime = "cpu-free"\nmarker = "after-fit"\n', after)


def existing_batches(stem):
    """Batches of every row already on disk for this graph, any regime, cap or marker."""
    batches = set()
    for f in (ROOT / "data/runs").glob(f"**/{stem}/b*.json"):
        batches.add(int(f.stem[1:].split("-")[0]))
    return batches


def round3(args):
    slow = ("lstm-lm", "gru", "cnn-lstm")
    free, under, over = [], [], []
    for g in sorted((ROOT / "data/graphs").glob("*-r[0-9].json")):
        rel = g.relative_to(ROOT)
        family, variant = rel.stem.rsplit("-", 1)
        cache = {}
        est_batch = lambda target: batch_for(args.memcal, g, target, args.factors, cache)
        taken = existing_batches(rel.stem)
        scale = 0.5 if family in slow else 1.0
        if variant == "r2":
            b = est_batch(2.2e9 * scale)
            while b in taken:
                b += 1
            free.append((rel, [b], [], "cpu-free"))
        if family in slow:
            continue
        # 4 GiB on r1 (under and over), 8 GiB on r3 (under and over).
        cap = {"r1": 4, "r3": 8}.get(variant)
        if cap:
            under.append((rel, [est_batch(0.85 * cap * GIB)], [cap], "cpu-edge"))
            over.append((rel, [est_batch(1.3 * cap * GIB)], [cap], "cpu-edge"))
    entries = free + over + under
    lines = ["# Generated by measurement/campaigns/make_plans.py --round3; re-run it to regenerate.\n"
             'device = "cpu"\nprecision = "fp32"\n']
    for rel, batches, caps, regime in entries:
        lines += ["[[run]]", f'graph = "{rel}"', f"batches = {json.dumps(batches)}"]
        if caps:
            lines.append(f"caps = {json.dumps(caps)}")
        lines += [f'regime = "{regime}"', ""]
    (HERE / "cpu-round3.toml").write_text("\n".join(lines))
    print(f"cpu-round3.toml: {len(entries)} runs")


def after2(args):
    slow = ("lstm-lm", "gru", "cnn-lstm")
    entries = []
    for g in sorted((ROOT / "data/graphs").glob("*-r[0-9].json")):
        rel = g.relative_to(ROOT)
        family, variant = rel.stem.rsplit("-", 1)
        cache = {}
        scale = 0.5 if family in slow else 1.0
        if variant not in ("r1", "r3"):
            continue
        target = 1.5e9
        b = batch_for(args.memcal, g, target * scale, args.factors, cache)
        taken = existing_batches(rel.stem)
        while b in taken:
            b += 1
        entries.append((rel, [b]))
    # The slow recurrent families last, so that a campaign cut short covers the others first.
    entries.sort(key=lambda e: (e[0].stem.rsplit("-", 1)[0] in slow, str(e[0])))
    lines = ["# Generated by measurement/campaigns/make_plans.py --after2; re-run it to regenerate.\n"
             'device = "cpu"\nprecision = "fp32"\nregime = "cpu-free"\nmarker = "after-fit"\n']
    for rel, batches in entries:
        lines += ["[[run]]", f'graph = "{rel}"', f"batches = {json.dumps(batches)}", ""]
    (HERE / "cpu-after-fit-2.toml").write_text("\n".join(lines))
    print(f"cpu-after-fit-2.toml: {len(entries)} runs")


# The graphs measured on the GPU: every family's full size where it fits one card (llama, mixtral
# and mla do not: r1 and r3 stand in), and its r3.
GPU_GRAPHS = {
    "bert": ["bert-base-cased", "bert-r3"], "cnn-lstm": ["cnn-lstm-full", "cnn-lstm-r3"],
    "conv1d-audio": ["conv1d-audio-full", "conv1d-audio-r3"], "gpt": ["gpt2-small", "gpt-r3"],
    "gru": ["gru-full", "gru-r3"], "llama": ["llama-r1", "llama-r3"],
    "lstm-lm": ["lstm-lm-full", "lstm-lm-r3"], "mixtral": ["mixtral-r1", "mixtral-r3"],
    "mla": ["mla-r1", "mla-r3"], "mlp": ["mlp-full", "mlp-r3"],
    "mobilenet": ["mobilenet-full", "mobilenet-r3"], "resnet": ["resnet50", "resnet-r3"],
    "t5": ["t5-small", "t5-r3"], "unet": ["unet-full", "unet-r3"], "vit": ["vit-b16", "vit-r3"],
}


def gpu(args):
    global PRECISION, MAX_BATCH
    PRECISION, MAX_BATCH = "bf16-autocast", 1 << 20
    header = 'device = "cuda:0"\nprecision = "bf16-autocast"\n'
    tiers = [[], [], [], [], []]
    for family, stems in sorted(GPU_GRAPHS.items()):
        for k, stem in enumerate(stems):
            rel = pathlib.Path("data/graphs") / f"{stem}.json"
            cache = {}
            est_batch = lambda target: batch_for(args.memcal, ROOT / rel, target, args.factors, cache)
            if args.gpu_after:
                taken = existing_batches(stem)
                cap = 16 if k == 0 else 40
                targets = [(t, [], "cuda-free") for t in (8e9, 20e9, 45e9)]
                targets += [(x * cap * GIB, [cap], "cuda-edge") for x in (0.9, 1.15)]
                for tier, (t, caps, regime) in enumerate(targets):
                    b = est_batch(t)
                    while b in taken:
                        b += 1
                    taken.add(b)
                    tiers[tier].append((rel, [b], caps, regime))
                continue
            fb = []
            for t in (4e9, 12e9, 32e9):
                b = est_batch(t)
                fb.append(b if not fb or b > fb[-1] else fb[-1] + 1)
            tiers[0].append((rel, [fb[0]], [], "cuda-free"))
            tiers[2].append((rel, [fb[1]], [], "cuda-free"))
            tiers[4].append((rel, [fb[2]], [], "cuda-free"))
            cap = 16 if k == 0 else 40
            tier = 1 if k == 0 else 3
            for x in (0.85, 1.3):
                tiers[tier].append((rel, [est_batch(x * cap * GIB)], [cap], "cuda-edge"))
    if args.gpu_after:
        name, entries = "cuda-after-fit.toml", [e for t in tiers for e in t]
        header += 'marker = "after-fit"\n'
    else:
        name, entries = "cuda.toml", [e for t in tiers for e in t]
    lines = [f"# Generated by measurement/campaigns/make_plans.py {'--gpu-after' if args.gpu_after else '--gpu'}; re-run it to regenerate.\n{header}"]
    for rel, batches, caps, regime in entries:
        lines += ["[[run]]", f'graph = "{rel}"', f"batches = {json.dumps(batches)}"]
        if caps:
            lines.append(f"caps = {json.dumps(caps)}")
        lines += [f'regime = "{regime}"', ""]
    (HERE / name).write_text("\n".join(lines))
    print(f"{name}: {len(entries)} runs")


if __name__ == "__main__":
    main()
