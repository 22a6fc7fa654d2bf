"""Tests of the generic `aten` node (`memcal_export/generic.py`): ops no memcal op stands for are
drawn as the ATen calls torch records, with shapes in B, parameters by name, CompositeImplicit
ops decomposed, and memcal's parameter count checked against the module's.

Run from the repository root (MEMCAL_BIN: the memcal binary):
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import json
import os
import subprocess
import tempfile
import unittest
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from memcal_export import ExportError, export, parameters, write
from memcal_export.generic import batch_expr, graph_parameters
from memcal_export.trace import _check_parameters

MEMCAL = os.environ.get("MEMCAL_BIN", "target/debug/memcal")


def plan(graph, batch=2):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.json")
        write(graph, path)
        r = subprocess.run([MEMCAL, "plan", path, "--batch", str(batch), "--precision", "fp32", "--json"],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"memcal plan refused the graph: {r.stderr}")
    d = json.loads(r.stdout)
    return d["parameters"], d["simulated"]["bytes"]


def aten(graph):
    return [n for n in graph["nodes"] if n["op"] == "aten"]


class Excite(nn.Module):
    """Squeeze-and-excitation (a [B, C, 1, 1] scale broadcast over the map), a pad, a layer scale
    (a learned [C, 1, 1] vector) read twice, and a roll over the batch merged with the channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(8, 1, 1))
        self.head = nn.Linear(8 * 10 * 10, 5)

    def forward(self, x):
        h = self.conv(x)
        s = torch.sigmoid(h.mean((2, 3), keepdim=True))
        h = h * s
        h = F.pad(h, (1, 1, 1, 1))
        h = h * self.scale + self.scale
        h = torch.roll(h.reshape(-1, 100), 1, 1).reshape(h.shape[0], -1)
        return self.head(h)


class Generic(unittest.TestCase):
    def draw(self, m, inputs, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return export(m, inputs, name="g", family="test", **kw)

    def test_a_broadcast_multiply_and_a_pad_are_aten_nodes_in_B(self):
        with torch.device("meta"):
            m = Excite()
        for tracer in ("auto", "export"):  # auto: torch.fx refuses the mean over two axes
            g = self.draw(m, [("x", ["B", 4, 8, 8], "float32")], tracer=tracer)
            by = {}
            for n in aten(g):
                by.setdefault(n["attributes"]["target"], []).append(n)
            self.assertEqual(sorted(by), ["aten.add.Tensor", "aten.constant_pad_nd.default", "aten.mean.dim",
                                          "aten.mul.Tensor", "aten.roll.default"])
            self.assertEqual(by["aten.mean.dim"][0]["attributes"]["shape"], ["B", 8, 1, 1])
            excite, scale = by["aten.mul.Tensor"]
            self.assertEqual(excite["attributes"]["args"], [{"input": 0}, {"input": 1}])
            self.assertEqual(excite["attributes"]["shape"], ["B", 8, 8, 8])
            self.assertEqual(excite["attributes"]["dtype"], "float32")
            pad = by["aten.constant_pad_nd.default"][0]["attributes"]  # F.pad, decomposed as eager runs it
            self.assertEqual(pad["args"], [{"input": 0}, [1, 1, 1, 1], 0.0])
            self.assertEqual(pad["shape"], ["B", 8, 10, 10])
            # The layer scale: a parameter by its name, shared by the two nodes that read it.
            self.assertEqual(scale["attributes"]["args"], [{"input": 0}, {"param": 0}])
            self.assertEqual(scale["attributes"]["params"], [{"name": "scale", "shape": [8, 1, 1]}])
            self.assertEqual(by["aten.add.Tensor"][0]["attributes"]["params"], [{"name": "scale", "shape": [8, 1, 1]}])
            roll = by["aten.roll.default"][0]["attributes"]
            self.assertEqual(roll["shape"], ["8*B", 100])
            counted, peak = plan(g)
            self.assertEqual(counted, parameters(m))
            self.assertEqual(counted, graph_parameters(g))
            self.assertIn("aten.pad.default", g["description"])  # the decomposition is noted

    def test_an_op_torch_records_is_never_refused(self):
        class Odd(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                h = torch.cumsum(self.fc(x), dim=1)
                h = h[:, ::2]  # a strided slice
                h = h.masked_fill(h > 0, 0.0) + torch.zeros_like(h)
                a, b = h.chunk(2, dim=-1)
                return F.hardswish(a) * b[:, :, :1]  # broadcast of a value

        with torch.device("meta"):
            m = Odd()
        g = self.draw(m, [("x", ["B", 6, 8], "float32")], loss="mse")
        targets = {n["attributes"]["target"] for n in aten(g)}
        self.assertTrue({"aten.cumsum.default", "aten.slice.Tensor", "aten.masked_fill.Scalar", "aten.gt.Scalar",
                         "aten.zeros_like.default", "aten.hardswish.default", "aten.mul.Tensor"} <= targets, targets)
        gt = next(n for n in aten(g) if n["attributes"]["target"] == "aten.gt.Scalar")
        self.assertEqual(gt["attributes"]["dtype"], "bool")
        self.assertEqual(plan(g)[0], parameters(m))

    def test_a_module_with_a_dropout_inside_sdpa_is_its_math_path(self):
        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(16, 48)

            def forward(self, x):
                q, k, v = self.qkv(x).view(x.shape[0], 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
                return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1).mean(1)

        with torch.device("meta"):
            m = Attn()
        g = self.draw(m, [("x", ["B", 8, 16], "float32")], loss="mse", tracer="export")
        targets = [n["attributes"]["target"] for n in aten(g)]
        self.assertNotIn("aten.scaled_dot_product_attention.default", targets)  # CompositeImplicit: decomposed
        self.assertIn("aten.bmm.default", targets)
        self.assertIn("aten.bernoulli_.float", targets)
        views = [n for n in aten(g) if n["attributes"]["target"] in ("aten.view.default", "aten._unsafe_view.default")]
        self.assertTrue(all(-1 in n["attributes"]["args"][1] for n in views))  # the batch's size as -1
        plan(g)

    def test_sizes_are_solved_as_c_times_a_power_of_B(self):
        self.assertEqual(batch_expr(3, 5, "x"), "B")
        self.assertEqual(batch_expr(192, 320, "x"), "64*B")
        self.assertEqual(batch_expr(9, 25, "x"), "B*B")
        self.assertEqual(batch_expr(7, 7, "x"), 7)
        with self.assertRaises(ExportError):
            batch_expr(4, 6, "x")  # B + 1

    def test_the_parameter_count_is_checked_against_the_module(self):
        with torch.device("meta"):
            m = Excite()
        g = self.draw(m, [("x", ["B", 4, 8, 8], "float32")])
        _check_parameters(m, g, 0)
        conv = next(n for n in g["nodes"] if n["op"] == "conv2d")
        conv["attributes"]["bias"] = False
        with self.assertRaisesRegex(ExportError, "holds 4,301 parameters where Excite has 4,309"):
            _check_parameters(m, g, 0)


class GraphParameters(unittest.TestCase):
    """The exporter's count of a graph's parameters is memcal's."""

    def test_memcal_counts_the_same(self):
        import torchvision

        with torch.device("meta"):
            models = [torchvision.models.mobilenet_v3_small(num_classes=10),
                      torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2,
                                                           hidden_dim=32, mlp_dim=64, num_classes=10)]
        for m in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = export(m, [("images", ["B", 3, 32, 32], "float32")], name="c", family="test")
            self.assertEqual(plan(g)[0], graph_parameters(g))
            self.assertEqual(graph_parameters(g), parameters(m))


if __name__ == "__main__":
    unittest.main()
