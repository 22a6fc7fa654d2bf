"""Tests of the real-model campaign (memcal_export.campaign) on a data folder of its own: a tiny
GPT-2 config reduced from data/models/gpt2, imported by `memcal graphs`, trained in Python and
stamped as a `memcal-run/1` row that memcal's loader reads (`memcal fit --data`).

Needs torch, transformers and the memcal binary (MEMCAL_BIN), run from the repository root:
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from memcal_export import campaign

MEMCAL = os.path.abspath(os.environ.get("MEMCAL_BIN", "target/debug/memcal"))
REPO = os.getcwd()

TINY = {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 500, "n_positions": 32, "bos_token_id": 0, "eos_token_id": 0}


class Campaign(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        data = os.path.join(self.tmp, "data")
        os.makedirs(os.path.join(data, "models", "gpt2"))
        shutil.copy(os.path.join(REPO, "data", "models", "gpt2", "config.json"), os.path.join(data, "models", "gpt2"))
        shutil.copy(os.path.join(REPO, "data", "factors.json"), data)
        # The measurement shim is compiled from the repository's source.
        shutil.copytree(os.path.join(REPO, "measurement", "shim"), os.path.join(self.tmp, "measurement", "shim"))
        spec = {
            "format": campaign.SPEC_FORMAT,
            "models": [{"graph": "hf-tiny", "model": "gpt2", "seq": 16, "batches": [2], "reduce": TINY}],
        }
        with open(os.path.join(data, "models", "measured.json"), "w") as f:
            json.dump(spec, f)
        self.data = data

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_memcal(self, *args):
        r = subprocess.run([MEMCAL, *args], capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_a_row_is_measured_stamped_and_read_by_memcal(self):
        cache = os.path.join(self.tmp, "cache")
        # Before the graph exists: measured and cached, not stamped.
        self.assertEqual(campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache]), 0)
        row_path = os.path.join(self.data, "runs", "cpu-real", "hf-tiny", "b2.json")
        self.assertFalse(os.path.exists(row_path))
        self.assertTrue(os.path.exists(os.path.join(cache, "hf-tiny", "b2.json")))
        self.run_memcal("graphs", "--out", "data/graphs", "--models", "data/models")
        graph_path = os.path.join(self.data, "graphs", "hf-tiny.json")
        self.assertEqual(campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only"]), 0)
        with open(row_path) as f:
            row = json.load(f)
        with open(graph_path, "rb") as f:
            self.assertEqual(row["graph"]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(row["regime"], "cpu-real")
        self.assertEqual(row["implementation"]["class"], "GPT2LMHeadModel")
        self.assertEqual(row["implementation"]["reduced"], TINY)
        self.assertFalse(row["graph_mismatch"], row["parameters"])
        self.assertEqual(row["peak"]["allocated_bytes"], max(p["allocated_peak"] for p in row["phases"]))
        # A row is never overwritten.
        before = os.path.getmtime(row_path)
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only"])
        self.assertEqual(os.path.getmtime(row_path), before)
        # The graph changes (edited here; in life, by a better importer): the row is restamped
        # only with --restamp, and a file the campaign did not write is never replaced.
        with open(graph_path) as f:
            g = json.load(f)
        g["description"] = "edited"
        with open(graph_path, "w") as f:
            json.dump(g, f)
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only"])
        self.assertEqual(os.path.getmtime(row_path), before)
        other = os.path.join(os.path.dirname(row_path), "b3.json")
        with open(other, "w") as f:
            f.write("{}")
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only", "--restamp"])
        with open(row_path) as f:
            restamped = json.load(f)
        with open(graph_path, "rb") as f:
            self.assertEqual(restamped["graph"]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertNotEqual(restamped["graph"], row["graph"])
        self.assertEqual(restamped["phases"], row["phases"])
        with open(other) as f:
            self.assertEqual(f.read(), "{}")
        os.remove(other)
        self.run_memcal("graphs", "--out", "data/graphs", "--models", "data/models", "--force")
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only", "--restamp"])
        # A measurement cached for another config is stale: never stamped against this one.
        spec_path = os.path.join(self.data, "models", "measured.json")
        with open(spec_path) as f:
            spec = json.load(f)
        spec["models"][0]["seq"] = 17
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        self.run_memcal("graphs", "--out", "data/graphs", "--models", "data/models", "--force")
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--stamp-only", "--restamp"])
        self.assertFalse(os.path.exists(os.path.join(cache, "hf-tiny", "b2.json")))
        with open(row_path) as f:
            self.assertEqual(json.load(f), row)  # restamped back against the restored graph
        spec["models"][0]["seq"] = 16
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        self.run_memcal("graphs", "--out", "data/graphs", "--models", "data/models", "--force")
        campaign.main(["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache])  # measures again
        # memcal's loader reads it as a held-out-by-regime row, and the simulator is within 1%.
        out = os.path.join(self.tmp, "calibration.json")
        self.run_memcal("fit", "--data", "data", "--out", out)
        with open(out) as f:
            cal = json.load(f)
        (r,) = [r for r in cal["rows"] if r["run_id"] == "cpu-real/hf-tiny/b2"]
        self.assertEqual(r["bucket"], "held-out-regime")
        measured = row["peak"]["allocated_bytes"]
        self.assertLess(abs(r["predictions"]["simulated"] / measured - 1), 0.01)


if __name__ == "__main__":
    unittest.main()
