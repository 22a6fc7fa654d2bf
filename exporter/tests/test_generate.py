"""Tests of the generation campaign (memcal_export.generate) on tiny models (a 1-layer GPT-2 and
a 1+1-layer T5 reduced from data/models/), with the harness's counting allocator compiled from
the repository's shim: the phase windows chain, the static cache does not depend on the case
before, a leak is refused, and the rows' fields. Stamping through `memcal plan` needs the memcal
binary (MEMCAL_BIN) and is skipped without.

Run from the repository root:
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

try:
    import transformers  # noqa: F401
except ImportError:  # pragma: no cover
    transformers = None

from memcal_export import campaign
from memcal_export import generate as G

MEMCAL = os.path.abspath(os.environ.get("MEMCAL_BIN", "target/debug/memcal"))
REPO = os.getcwd()

GPT = {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 500, "n_positions": 64}
T5 = {"num_layers": 1, "num_decoder_layers": 1, "d_model": 64, "d_kv": 16, "num_heads": 4, "d_ff": 128,
      "vocab_size": 500}
SPEC = {
    "format": G.SPEC_FORMAT,
    "models": [
        {"graph": "gen-tiny", "model": "gpt2", "reduce": GPT, "batches": [2], "prompts": [8], "new": [4],
         "caches": ["dynamic", "static"]},
        {"graph": "gen-tiny-t5", "model": "t5-small", "reduce": T5, "batches": [2], "prompts": [8], "new": [4],
         "caches": ["dynamic"]},
    ],
}


def strip_walls(phases):
    return [{k: v for k, v in p.items() if k != "wall_seconds"} for p in phases]


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class Generate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        data = os.path.join(cls.tmp, "data")
        for m in ("gpt2", "t5-small"):
            os.makedirs(os.path.join(data, "models", m))
            shutil.copy(os.path.join(REPO, "data", "models", m, "config.json"), os.path.join(data, "models", m))
        shutil.copy(os.path.join(REPO, "data", "factors.json"), data)
        with open(os.path.join(data, "models", "generate.json"), "w") as f:
            json.dump(SPEC, f)
        shutil.copytree(os.path.join(REPO, "measurement", "shim"), os.path.join(cls.tmp, "measurement", "shim"))
        cls.data = data
        cls.cache = os.path.join(cls.tmp, "cache")
        # The campaign's own place for the shim (main() loads the very same library).
        cls.counter = G.M.Counter(G.M.build_counter(cls.tmp, os.path.join(cls.cache, "build")))
        cls.entries = {e["graph"]: e for e in G.load_spec(cls.tmp)}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def config(self, graph):
        return campaign.merged_config(self.tmp, self.entries[graph])

    def test_phase_windows_chain_and_the_output_is_counted(self):
        model, base, load = G.load_model(self.counter, self.config("gen-tiny"))
        self.assertGreater(load["end"], 0)
        for cache in ("dynamic", "static"):
            b, p, n = 2, 8, 4
            m = G.measure_case(self.counter, model, base, load["end"], (b, p, n, cache))
            inputs, prefill, decode = m["phases"]
            self.assertEqual([x["name"] for x in m["phases"]], ["inputs", "prefill", "decode"])
            self.assertEqual(inputs["start"], load["end"], cache)
            self.assertEqual(inputs["end"] - inputs["start"], 2 * b * p * 8, cache)  # ids + mask, int64
            self.assertEqual(prefill["start"], inputs["end"], cache)
            self.assertEqual(decode["start"], prefill["end"], cache)
            for x in (prefill, decode):
                self.assertGreaterEqual(x["peak"], max(x["start"], x["end"]), cache)
            # The prefill holds the cache (and the first logits) beyond the inputs.
            self.assertGreater(prefill["peak"], inputs["end"], cache)
            self.assertGreater(prefill["end"], inputs["end"], cache)
            # generate returns with its cache dropped: what is left is the returned sequences.
            self.assertEqual(decode["end"] - inputs["end"], b * (p + n) * 8, cache)
            self.assertEqual(m["output_shape"], [b, p + n])
            self.assertEqual(m["forward_calls"], n)
            self.assertEqual(m["logits_processors"], [])
            events = [e["event"] for e in m["events"]]
            self.assertEqual(events[0], "generate")
            self.assertEqual(events[-1], "return")
            self.assertEqual(events.count("model2.pre"), 1)
        del model

    def test_a_static_case_does_not_depend_on_the_case_before(self):
        config = self.config("gen-tiny")
        model, base, load = G.load_model(self.counter, config)
        fresh = G.measure_case(self.counter, model, base, load["end"], (2, 8, 4, "static"))
        G.measure_case(self.counter, model, base, load["end"], (2, 24, 16, "static"))
        again = G.measure_case(self.counter, model, base, load["end"], (2, 8, 4, "static"))
        self.assertEqual(strip_walls(fresh["phases"]), strip_walls(again["phases"]))
        del model

    def test_a_leak_is_refused(self):
        model, base, load = G.load_model(self.counter, self.config("gen-tiny"))
        kept = []
        handle = model.register_forward_hook(lambda _m, _a, out: kept.append(out.logits))
        try:
            with self.assertRaises(G.Leak):
                G.measure_case(self.counter, model, base, load["end"], (1, 8, 4, "dynamic"))
        finally:
            handle.remove()
            kept.clear()
        # Once released, the next case measures again.
        G.measure_case(self.counter, model, base, load["end"], (1, 8, 4, "dynamic"))
        del model

    def test_an_encoder_decoder_runs_its_encoder_in_the_prefill(self):
        model, base, load = G.load_model(self.counter, self.config("gen-tiny-t5"))
        b, p, n = 2, 8, 4
        m = G.measure_case(self.counter, model, base, load["end"], (b, p, n, "static"))
        self.assertEqual(m["output_shape"], [b, n + 1])
        self.assertEqual(m["encoder_calls"], 1)
        self.assertEqual(m["forward_calls"], n)
        events = [e["event"] for e in m["events"]]
        self.assertLess(events.index("encoder1.post"), events.index("model1.pre"))
        inputs, prefill, decode = m["phases"]
        self.assertEqual(decode["end"] - inputs["end"], b * (n + 1) * 8)
        del model

    def test_id_range_avoids_special_ids(self):
        self.assertEqual(G.id_range(100, {0, 1, 2}), (3, 100))
        self.assertEqual(G.id_range(100, {99}), (0, 99))
        self.assertEqual(G.id_range(100, {10, 500}), (11, 100))
        self.assertEqual(G.id_range(10, set()), (0, 10))

    def test_the_row_names_its_strategy_and_graph(self):
        graph_path = os.path.join(self.tmp, "fake-graph.json")
        with open(graph_path, "w") as f:
            f.write('{"name": "gen-tiny"}\n')
        entry = self.entries["gen-tiny"]
        measured = {"phases": [{"name": "model_load", "start": 0, "peak": 10, "end": 8, "wall_seconds": 0.1},
                               {"name": "prefill", "start": 8, "peak": 30, "end": 12, "wall_seconds": 0.1}],
                    "device_name": "cpu", "capacity_bytes": 1, "host": "h", "torch": "2.11.0",
                    "timestamp": "2026-12-05T00:00:00Z", "parameters": 7,
                    "implementation": {"library": "transformers 5.24.0", "class": "GPT2LMHeadModel",
                                       "config": "models/gpt2/config.json", "reduced": GPT}}
        row = G.stamp(measured, entry, (4, 256, 32, "static"), graph_path, 7)
        self.assertEqual(row["strategy"], "generate:prompt=256,new=32,cache=static")
        self.assertEqual(row["run_id"], "cpu-generate/gen-tiny/b4/generate:prompt=256,new=32,cache=static")
        self.assertEqual(row["regime"], "cpu-generate")
        with open(graph_path, "rb") as f:
            self.assertEqual(row["graph"]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(row["peak"], {"allocated_bytes": 30, "reserved_bytes": 30, "phase": "prefill"})
        self.assertFalse(row["graph_mismatch"])
        self.assertTrue(G.stamp(measured, entry, (4, 256, 32, "static"), graph_path, 8)["graph_mismatch"])
        self.assertEqual(G.row_name(4, 256, 32, "static"), "b4-generate-prompt256-new32-static.json")

    def test_main_caches_then_stamps_without_overwriting(self):
        cache = self.cache
        runs = os.path.join(self.tmp, "runs")
        args = ["--repo", self.tmp, "--memcal", MEMCAL, "--cache", cache, "--runs", runs, "--only", "gen-tiny"]
        self.assertEqual(G.main(args), 0)
        cached = [os.path.join(cache, "gen-tiny", f"b2-prompt8-new4-{c}.json") for c in ("dynamic", "static")]
        for path in cached:
            self.assertTrue(os.path.exists(path), path)
        self.assertFalse(os.path.exists(runs))  # no data/graphs/gen-tiny.json yet: not stamped
        mtimes = [os.path.getmtime(p) for p in cached]
        self.assertEqual(G.main(args), 0)  # resumed: nothing measured again
        self.assertEqual(mtimes, [os.path.getmtime(p) for p in cached])
        with open(cached[0]) as f:
            m = json.load(f)
        self.assertEqual([p["name"] for p in m["phases"]], ["model_load", "inputs", "prefill", "decode"])
        if not os.path.exists(MEMCAL):
            self.skipTest("stamping needs the memcal binary (MEMCAL_BIN)")
        graphs = os.path.join(self.data, "graphs")
        os.makedirs(graphs, exist_ok=True)
        config_path = os.path.join(self.tmp, "gen-tiny.config.json")
        with open(config_path, "w") as f:
            json.dump(self.config("gen-tiny"), f)
        r = subprocess.run([MEMCAL, "import", "hf", config_path, "--name", "gen-tiny", "--out",
                            os.path.join(graphs, "gen-tiny.json"), "--force"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(G.main(args + ["--stamp-only"]), 0)
        row_path = os.path.join(runs, "gen-tiny", "b2-generate-prompt8-new4-static.json")
        with open(row_path) as f:
            row = json.load(f)
        self.assertEqual(row["parameters"]["built"], m["parameters"])
        self.assertFalse(row["graph_mismatch"])
        self.assertEqual(row["strategy"], "generate:prompt=8,new=4,cache=static")
        with open(row_path, "w") as f:
            f.write("{}")
        self.assertEqual(G.main(args + ["--stamp-only"]), 0)
        with open(row_path) as f:
            self.assertEqual(f.read(), "{}")  # never overwritten


if __name__ == "__main__":
    unittest.main()
