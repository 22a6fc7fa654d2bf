"""Tests of the GPU campaign's plan (memcal_export.gpu) and of its stamping
(memcal_export.gpu_stamp) that need no GPU: the order a campaign cut short still covers every
part in, one job per id, capped jobs after their reference, the estimate from shipped
measurements, and the rows the shipped measurements stamp to (the committed ones).

Run from the repository root:
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import json
import os
import tempfile
import unittest

from memcal_export import gpu, gpu_stamp

REPO = os.getcwd()
MEMCAL = os.path.abspath(os.environ.get("MEMCAL_BIN", "target/debug/memcal"))
PLANS = [os.path.join(REPO, "measurement", "campaigns", p) for p in ("gpu-real.json", "gpu-real-2.json")]


class Plan(unittest.TestCase):
    def test_every_plan_orders_waves_and_settings_and_names_each_job_once(self):
        for path in PLANS:
            plan = gpu.load_plan(path)
            jobs = gpu.expand(plan, False)
            ids = [j["id"] for j in jobs]
            self.assertEqual(len(ids), len(set(ids)), path)
            waves = [j["wave"] for j in jobs]
            self.assertEqual(waves, sorted(waves), path)
            # One worker per allocator setting and wave: the segments never revisit a setting.
            segs = [(j["wave"], j["allocator"]) for j in jobs]
            runs = [s for k, s in enumerate(segs) if k == 0 or segs[k - 1] != s]
            self.assertEqual(len(runs), len(set(runs)), path)
            for k, j in enumerate(jobs):
                if "cap_of" in j:
                    self.assertIn(j["cap_of"], ids[:k], f"{path}: {j['id']} runs before its reference")

    def test_wave_one_covers_every_kind_and_setting(self):
        plan = gpu.load_plan(PLANS[0])
        first = [j for j in gpu.expand(plan, False) if j["wave"] == 1]
        self.assertEqual({j["kind"] for j in first}, {"train", "generate", "lora"})
        self.assertEqual({j["allocator"] for j in first}, set(plan["allocators"]))
        self.assertTrue(any("cap_factor" in j for j in first))
        self.assertEqual({j["precision"] for j in first if j["kind"] == "train"}, {"bf16", "bf16-autocast"})

    def test_the_dry_run_is_tiny_and_keeps_every_kind(self):
        plan = gpu.load_plan(PLANS[0])
        dry = gpu.expand(plan, True)
        self.assertEqual({j["kind"] for j in dry}, {j["kind"] for j in gpu.expand(plan, False)})
        self.assertTrue(all(j["batch"] <= plan["dry_run"]["max_batch"] for j in dry))
        self.assertTrue(all(j.get("seq", 0) <= plan["dry_run"]["seq"] for j in dry))

    def test_a_bad_plan_names_the_field(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"format": gpu.PLAN_FORMAT, "seq": 8, "allocators": {"default": ""},
                       "jobs": [{"kind": "train", "model": "gpt2", "batches": [1], "allocators": ["nope"]}]}, f)
        with self.assertRaises(SystemExit) as e:
            gpu.load_plan(f.name)
        self.assertIn("jobs[0].allocators", str(e.exception))

    def test_the_estimate_reads_the_shipped_measurements(self):
        total, n, known = gpu.estimate(gpu.load_plan(PLANS[0]), os.path.join(REPO, "data", "gpu"))
        self.assertEqual(known, n)
        self.assertLess(total, 480)  # gpu-all.sh's default budget
        self.assertGreater(total, 0)


@unittest.skipUnless(os.path.exists(MEMCAL), "needs the memcal binary (MEMCAL_BIN)")
class Stamp(unittest.TestCase):
    def test_the_shipped_measurements_stamp_to_the_committed_rows(self):
        with tempfile.TemporaryDirectory() as runs:
            gpu_stamp.main(["--repo", REPO, "--memcal", MEMCAL, "--runs", runs,
                            "--from", os.path.join(REPO, "data", "gpu", "2026-12-04-h200")])
            committed = os.path.join(REPO, "data", "runs", gpu_stamp.REGIME)
            made = sorted(os.path.relpath(os.path.join(d, f), runs) for d, _, fs in os.walk(runs) for f in fs)
            shipped = sorted(os.path.relpath(os.path.join(d, f), committed) for d, _, fs in os.walk(committed) for f in fs)
            self.assertEqual(made, shipped)
            for rel in made:
                with open(os.path.join(runs, rel)) as a, open(os.path.join(committed, rel)) as b:
                    self.assertEqual(json.load(a), json.load(b), rel)

    def test_the_committed_table_of_measurements_is_current(self):
        source = os.path.join(REPO, "data", "gpu", "2026-12-04-h200")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "m.md")
            gpu_stamp.main(["--repo", REPO, "--memcal", MEMCAL, "--runs", os.path.join(tmp, "runs"),
                            "--from", source, "--summary", out])
            with open(out) as a, open(os.path.join(source, "measurements.md")) as b:
                self.assertEqual(a.read(), b.read(), "rerun gpu_stamp --summary data/gpu/2026-12-04-h200/measurements.md")


if __name__ == "__main__":
    unittest.main()
