"""The per-rank campaign's runner (`memcal_export.ranks`) on a tiny Llama: two processes on gloo
(loopback only), each with the counting allocator, ending by themselves. DDP's ranks must hold
exactly the plain step plus its reducer's buckets (4 bytes a parameter) in every phase, and
ZeRO-1's ranks together exactly the plain step's AdamW states (no rank holding all of them).
About 40 s on 2 cores."""

import os
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIG = {
    "model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}
GRAPH = {
    "inputs": [
        {"name": "tokens", "shape": ["B", 16], "dtype": "int64", "classes": 256},
        {"name": "labels", "shape": ["B", 16], "dtype": "int64", "classes": 256},
    ],
    "nodes": [{"id": "loss", "op": "cross_entropy"}],
    "loss": "loss",
}


def job(spec):
    from memcal_export import ranks

    return {"graph_name": "tiny", "model": "tiny", "config": CONFIG, "graph": GRAPH, "batch": 2,
            "spec": spec, "world": ranks.world_of(spec), "tp": "llama"}


def run_specs(specs, make_job=job):
    """Runs each spec's ranks (the counting allocator, 300 s at most a run) in a new temporary
    folder; returns the folder and {spec: the ranks' results}. A failed run fails the caller."""
    from memcal_export import measure as M
    from memcal_export import ranks

    tmp = tempfile.TemporaryDirectory()
    so = M.build_counter(REPO, os.path.join(REPO, "target", "ranks"))
    results = {}
    for spec in specs:
        out, why = ranks.run_job(so, make_job(spec), tmp.name, 300)
        if why:
            raise AssertionError(f"{spec}: {why}")
        results[spec] = out
    return tmp, results


class RanksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.results = run_specs(["plain", "ddp:world=2", "zero1:world=2"])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_ddp_is_plain_plus_its_buckets_on_every_rank(self):
        plain = self.results["plain"][0]
        params = plain["parameters"]
        for rank in self.results["ddp:world=2"]:
            self.assertEqual(rank["parameters"], params)
            for p, d in zip(plain["phases"], rank["phases"]):
                self.assertEqual(p["name"], d["name"])
                self.assertEqual(d["end"] - p["end"], 4 * params, p["name"])
                # At construction DDP also broadcasts the module's state in flat copies
                # (`_sync_module_states`): model_load's peak is higher, not its end.
                if p["name"] != "model_load":
                    self.assertEqual(d["peak"] - p["peak"], 4 * params, p["name"])

    def test_zero1_partitions_the_states(self):
        plain = self.results["plain"][0]
        params = plain["parameters"]
        ends = [r["phases"][4]["end"] for r in self.results["zero1:world=2"]]  # step1.optimizer
        # Each rank: weights, buckets and its share of the two AdamW states (plus 4-byte step
        # counters, a few bytes each); together the plain step's 8 bytes a parameter of states.
        shares = [e - 8 * params for e in ends]
        self.assertTrue(all(0 < s < 8 * params for s in shares), shares)
        self.assertAlmostEqual(sum(shares), 8 * params, delta=4096)

    def test_a_rank_that_fails_fails_the_run(self):
        from memcal_export import measure as M
        from memcal_export import ranks

        so = M.build_counter(REPO, os.path.join(REPO, "target", "ranks"))
        bad = job("tp:k=2")
        bad["config"] = dict(CONFIG, num_attention_heads=3, num_key_value_heads=3, hidden_size=48)
        out, why = ranks.run_job(so, bad, self.tmp.name, 300)
        self.assertIsNone(out)
        self.assertIn("rank", why)


if __name__ == "__main__":
    unittest.main()
