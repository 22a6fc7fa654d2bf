"""Tests of the OpInfo memory check (`memcal_export/opcheck.py`): single ATen ops measured with
the harness's counting allocator, directly and on torch's OpInfo samples (mul, exp, sum).

Each measurement runs in a child process: the counting allocator is installed process-wide and
opcheck sets one thread. Run from the repository root:
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
The OpInfo test needs `expecttest` (imported by torch.testing._internal) and is skipped without.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "target", "opcheck")

DIRECT = """
import json, sys, torch
from memcal_export import opcheck as oc
meter = oc.CpuMeter(sys.argv[1], sys.argv[2])
torch.set_num_threads(1)
x = torch.randn(5, 5, requires_grad=True)
y = torch.randn(5, 5, requires_grad=True)
out = {}
for name, func, args in [("exp", torch.ops.aten.exp.default, (x,)),
                         ("mul", torch.ops.aten.mul.Tensor, (x, y)),
                         ("t", torch.ops.aten.t.default, (x,)),
                         ("sum", torch.ops.aten.sum.default, (x,))]:
    run, outputs, tensors = oc.measure_call(meter, func, *args)
    out[name] = {"run": run, "outputs": outputs, "tensors": tensors}
print(json.dumps(out))
"""


def child(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, p) for p in (".libtorch", ".libtorch/py", "exporter")]
        + [env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable] + args, capture_output=True, text=True, env=env, cwd=REPO)
    if r.returncode != 0:
        raise AssertionError(f"{args[:2]} failed:\n{r.stderr[-3000:]}")
    return r


def has_op_db():
    return importlib.util.find_spec("expecttest") is not None


class DirectCalls(unittest.TestCase):
    """Exact bytes of single ATen calls on [5, 5] float32 leaves (100 bytes each)."""

    @classmethod
    def setUpClass(cls):
        cls.d = json.loads(child(["-c", DIRECT, REPO, BUILD]).stdout)

    def test_exp(self):
        run = self.d["exp"]["run"]
        self.assertEqual(run["forward"], {"peak": 100, "end": 100})
        b = run["backward"]
        self.assertEqual((b["grad_outputs"], b["grads"], b["end"]), (100, [100], 100))
        self.assertEqual(self.d["exp"]["outputs"][0]["aliases"], None)
        self.assertEqual(self.d["exp"]["tensors"][0]["nbytes"], 100)

    def test_mul(self):
        run = self.d["mul"]["run"]
        self.assertEqual(run["forward"]["end"], 100)
        self.assertEqual(run["backward"]["grads"], [100, 100])
        self.assertEqual(run["backward"]["end"], 200)

    def test_view_aliases_input(self):
        d = self.d["t"]
        self.assertEqual(d["run"]["forward"], {"peak": 0, "end": 0})
        self.assertEqual(d["outputs"][0]["aliases"], 0)
        self.assertEqual(d["outputs"][0]["strides"], [1, 5])
        # the input's grad is the transposed grad_output: same storage, nothing new at the end
        self.assertEqual(d["run"]["backward"]["grads_alias"], [0])
        self.assertEqual(d["run"]["backward"]["end"], 0)

    def test_sum(self):
        run = self.d["sum"]["run"]
        self.assertEqual(run["forward"]["end"], 4)
        self.assertEqual(run["backward"]["grads"], [100])


@unittest.skipUnless(has_op_db(), "torch.testing._internal needs expecttest")
class OpInfoSamples(unittest.TestCase):
    """The CLI on mul, exp and sum, one sample each."""

    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "ops.json")
            child(["-m", "memcal_export.opcheck", "--ops", "mul,exp,sum", "--samples", "1",
                   "--out", out, "--repo", REPO, "--build-dir", BUILD])
            with open(out, "rb") as f:
                cls.raw = f.read()
        cls.doc = json.loads(cls.raw)
        cls.by = {s["opinfo"]: s for s in cls.doc["samples"]}

    def test_header(self):
        d = self.doc
        self.assertEqual((d["format"], d["device"], d["dtype"], d["threads"]),
                         ("memcal-opcheck/1", "cpu", "float32", 1))
        self.assertNotIn("truncated", d)
        self.assertEqual(sorted(self.by), ["exp", "mul", "sum"])

    def test_targets(self):
        self.assertEqual(self.by["mul"]["target"], "aten.mul.Tensor")
        self.assertEqual(self.by["exp"]["target"], "aten.exp.default")
        self.assertTrue(self.by["sum"]["target"].startswith("aten.sum."))

    def test_unary_output_is_input_sized(self):
        s = self.by["exp"]
        nbytes = s["tensors"][0]["nbytes"]
        self.assertEqual(s["args"], [{"tensor": 0}])
        self.assertEqual(s["forward"]["end"], nbytes)
        self.assertEqual(s["outputs"][0]["shape"], s["tensors"][0]["shape"])
        self.assertEqual(s["backward"]["grads"], [nbytes])
        self.assertTrue(s["stable"])

    def test_mul_grads(self):
        s = self.by["mul"]
        self.assertEqual(len(s["backward"]["grads"]), len(s["tensors"]))
        for t, g in zip(s["tensors"], s["backward"]["grads"]):
            self.assertEqual(g, t["nbytes"] if t["requires_grad"] else None)

    def test_sum_is_scalar(self):
        s = self.by["sum"]
        self.assertEqual(s["outputs"][0]["shape"], [])
        self.assertEqual(s["forward"]["end"], 4)

    def test_bytes_sorted_and_indented(self):
        self.assertTrue(self.raw.startswith(b'{\n "counter": '))
        self.assertTrue(self.raw.endswith(b"\n"))


if __name__ == "__main__":
    unittest.main()
