#!/usr/bin/env python3
"""Summarises the measured rows and the engine's result for a campaign's closing note: rows per
family and regime (before / after the fit), OOM count, did-not-fit card checks, the factors,
the held-out median |error| per family, and the campaign's wall time (the sum of every row's
phase wall times, and the span from the first to the last row's start).

Usage:
  cargo run -q -- fit --out /tmp/calibration.json
  measurement/campaigns/summary.py /tmp/calibration.json [--data data]
"""
import argparse
import collections
import datetime
import json
import pathlib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibration", help="calibration.json written by `memcal fit --out`")
    ap.add_argument("--data", default="data")
    args = ap.parse_args()
    cal = json.load(open(args.calibration))
    # The family of a graph, as its file says (gpt2-small is a gpt, resnet50 a resnet).
    family_of = {}
    for g in pathlib.Path(args.data, "graphs").glob("*.json"):
        gj = json.loads(g.read_text())
        family_of[gj["name"]] = gj.get("family", gj["name"])
    rows = []
    for f in sorted(pathlib.Path(args.data, "runs").glob("**/*.json")):
        r = json.loads(f.read_text())
        rows.append(r)
    per = collections.defaultdict(collections.Counter)
    status = collections.Counter()
    wall = 0.0
    stamps = []
    for r in rows:
        family = family_of.get(r["graph"]["name"], r["graph"]["name"])
        col = r["regime"] + (" after-fit" if r.get("marker") == "after-fit" else "")
        per[family][col] += 1
        status[(r["regime"], r["status"])] += 1
        wall += sum(p.get("wall_seconds", 0.0) for p in r["phases"])
        stamps.append(r["timestamp"])
    cols = sorted({c for v in per.values() for c in v})
    print(f"{len(rows)} rows")
    print("| family | " + " | ".join(cols) + " | all |")
    print("|---|" + "---:|" * (len(cols) + 1))
    for fam in sorted(per):
        v = per[fam]
        print(f"| {fam} | " + " | ".join(str(v[c]) for c in cols) + f" | {sum(v.values())} |")
    tot = collections.Counter()
    for v in per.values():
        tot.update(v)
    print("| all | " + " | ".join(str(tot[c]) for c in cols) + f" | {sum(tot.values())} |")
    print()
    print("status by regime:", ", ".join(f"{k[0]} {k[1]} {n}" for k, n in sorted(status.items())))
    t = cal["totals"]
    print(f"engine: {t['inputs']} in = {t['fitted']} fitted + {t['held_out_regime']} held out by "
          f"regime + {t['after_fit']} after the fit + {t['excluded']} excluded "
          f"({', '.join(f'{k} {n}' for k, n in cal['excluded_by_reason'].items()) or 'none'})")
    dnf = cal["methods"]["accelerate"]["did_not_fit_checks"]
    print(f"did-not-fit card checks (over every usable row): {dnf}")
    for prec, fits in cal["fits"].items():
        print(f"factors {prec}: shipped {[round(x, 4) for x in fits['shipped']['factors']]} "
              f"({fits['shipped']['source']}); in data/factors.json "
              f"{[round(x, 4) for x in fits['file_factors']]}")
        u = fits["upper"]
        print(f"upper {prec}: q90 {u['q90']}, q95 {u['q95']} over {len(u['ratios'])} fitted runs >= 1 GB")
    print()
    print("| profile | method | median abs error (rows >= 1 GB) | rows | within 25% | missed OOM |")
    print("|---|---|---:|---:|---:|---:|")
    for prec, fits in cal["fits"].items():
        for m, x in fits["methods"].items():
            e = x.get("median_abs_rel_error")
            w = x.get("within_25pct")
            print(f"| {prec} | {m} | {'-' if e is None else f'{100 * e:.1f}%'} | {x['error_rows']} | "
                  f"{'-' if w is None else f'{100 * w:.1f}%'} | {len(x['missed_oom'])} of {x['did_not_fit_checks']} |")
    print()
    print("| family | profile | held-out-by-architecture median abs error (rows >= 1 GB) | rows | after-the-fit median | rows |")
    print("|---|---|---:|---:|---:|---:|")
    for fam, rep in sorted(cal["families"].items()):
        groups = [("all", rep["methods"])] + sorted(rep.get("by_profile", {}).items())
        for prof, methods in groups:
            def cell(m):
                x = methods.get(m, {})
                e = x.get("median_abs_rel_error")
                return ("-" if e is None else f"{100 * e:.1f}%"), x.get("error_rows", 0)
            h, hn = cell("plan-held-out-architecture")
            a, an = cell("plan-after-fit")
            print(f"| {fam} | {prof} | {h} | {hn} | {a} | {an} |")
    parse = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    span = parse(max(stamps)) - parse(min(stamps))
    print()
    print(f"wall time: {wall / 3600:.2f} h of measured phases over {len(rows)} rows; "
          f"first row {min(stamps)}, last {max(stamps)} (span {span})")


if __name__ == "__main__":
    main()
