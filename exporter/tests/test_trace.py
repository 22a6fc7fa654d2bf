"""Tests of the exporter: real torchvision classes and small modules, drawn on the meta device
and checked by memcal itself (`memcal plan` loads the graph and counts its parameters).

Needs torch (scripts/setup-pytorch.sh) and the memcal binary: MEMCAL_BIN (default
target/debug/memcal), run from the repository root:
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import json
import os
import subprocess
import tempfile
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

from memcal_export import ExportError, export, parameters, write
from memcal_export.trace import build_on_meta

MEMCAL = os.environ.get("MEMCAL_BIN", "target/debug/memcal")


def plan(graph, batch=2):
    """memcal's own reading of the graph: (parameters, simulated peak bytes)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.json")
        write(graph, path)
        r = subprocess.run(
            [MEMCAL, "plan", path, "--batch", str(batch), "--precision", "fp32", "--json"],
            capture_output=True, text=True,
        )
    if r.returncode != 0:
        raise AssertionError(f"memcal plan refused the graph: {r.stderr}")
    d = json.loads(r.stdout)
    return d["parameters"], d["simulated"]["bytes"]


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop0 = nn.Dropout(0.0)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = self.drop0(F.gelu(self.fc1(x), approximate="tanh"))
        h = h * 0.5 + 1.0
        return self.fc2(torch.exp(h))


class Unknown(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


class WidthsFromTensors(nn.Module):
    """Reads tensor values while it is built (as torchvision's RegNet does)."""

    def __init__(self):
        super().__init__()
        widths = (torch.arange(2) * 8 + 8).tolist()
        self.fc1 = nn.Linear(16, widths[0])
        self.fc2 = nn.Linear(widths[0], widths[1])
        self.register_buffer("scale", torch.ones(widths[1]))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) * self.scale


class TestExport(unittest.TestCase):
    def test_a_module_reading_tensor_values_while_built_is_built_with_meta_weights(self):
        with self.assertRaises((NotImplementedError, RuntimeError)):
            with torch.device("meta"):
                WidthsFromTensors()
        m = build_on_meta(WidthsFromTensors)
        self.assertEqual({p.device.type for p in m.parameters()}, {"meta"})
        self.assertEqual(m.scale.device.type, "meta")
        self.assertEqual([p.shape[0] for p in m.parameters()], [8, 8, 16, 16])
        g = export(m, [("x", ["B", 16], "float32")], name="widths", family="test")
        self.assertEqual(plan(g)[0], parameters(m))

    def test_small_module_ops_and_parameters(self):
        with torch.device("meta"):
            m = Mlp()
        g = export(m, [("x", ["B", 16], "float32")], name="mlp", family="test")
        ops = [n["op"] for n in g["nodes"]]
        # p = 0 dropout is no op in torch and is not drawn; scalars become `unary`.
        self.assertEqual(ops, ["linear", "gelu", "unary", "unary", "unary", "linear", "cross_entropy"])
        self.assertEqual(g["nodes"][1]["attributes"], {"approximate": "tanh"})
        self.assertEqual(g["nodes"][2]["attributes"], {"fn": "mul_scalar", "scalar": 0.5})
        self.assertEqual(g["inputs"][-1], {"name": "labels", "shape": ["B"], "dtype": "int64", "classes": 4})
        self.assertEqual(plan(g)[0], parameters(m))

    def test_a_function_no_memcal_op_stands_for_goes_through_torch_export(self):
        # torch.fx refuses cumsum; torch.export draws it as a generic `aten` node.
        with torch.device("meta"):
            m = Unknown()
        g = export(m, [("x", ["B", 4, 8], "float32")], name="u", family="test")
        self.assertIn("torch.export", g["description"])
        (cumsum,) = [n for n in g["nodes"] if n["op"] == "aten"]
        self.assertEqual(cumsum["attributes"], {"target": "aten.cumsum.default", "args": [{"input": 0}, 1],
                                                "shape": ["B", 4, 8], "dtype": "float32"})
        self.assertEqual(plan(g)[0], parameters(m))

    def test_torchvision_resnet18(self):
        import torchvision

        with torch.device("meta"):
            m = torchvision.models.resnet18(num_classes=10)
        g = export(m, [("images", ["B", 3, 64, 64], "float32")], name="r18", family="test")
        self.assertEqual(plan(g)[0], parameters(m))
        ids = [n["id"] for n in g["nodes"]]
        self.assertIn("layer1.0.conv1", ids)  # module paths are the ids (blocks stay visible)

    def test_torchvision_vit_uses_sdpa_and_its_tokens(self):
        import torchvision

        with torch.device("meta"):
            m = torchvision.models.VisionTransformer(
                image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
            )
        g = export(m, [("images", ["B", 3, 32, 32], "float32")], name="vit", family="test")
        ops = {n["op"] for n in g["nodes"]}
        self.assertTrue({"prepend_token", "learned_position", "select_token"} <= ops)
        attn = [n for n in g["nodes"] if n["op"] == "multihead_attention"]
        # torchvision calls attention with need_weights=False: torch runs sdpa, through
        # nn.MultiheadAttention's own forward (memcal's impl "torch").
        self.assertEqual([a["attributes"]["backend"] for a in attn], ["sdpa", "sdpa"])
        self.assertEqual([a["attributes"]["impl"] for a in attn], ["torch", "torch"])
        self.assertEqual(plan(g)[0], parameters(m))

    def test_cross_attention_with_a_narrower_memory_takes_kdim(self):
        from memcal_export.proof import _cross_attention

        for need_weights, backend in [(True, None), (False, "sdpa")]:
            with torch.device("meta"):
                m = _cross_attention(need_weights)
            g = export(m, [("x", ["B", 32, 128], "float32"), ("m", ["B", 96, 48], "float32")],
                       name="cross", family="test", classes=10)
            (attn,) = [n for n in g["nodes"] if n["op"] == "multihead_attention"]
            self.assertEqual(attn["attributes"]["kdim"], 48)
            self.assertEqual(attn["attributes"].get("backend"), backend)
            self.assertEqual(attn["attributes"].get("impl"), "torch" if backend else None)
            self.assertEqual(len(attn["inputs"]), 2)
            self.assertEqual(plan(g, batch=4)[0], parameters(m))

    def test_a_latent_array_is_the_parameter_op(self):
        from memcal_export.proof import _perceiver

        with torch.device("meta"):
            m = _perceiver()
        g = export(m, [("m", ["B", 96, 48], "float32")], name="perceiver", family="test", classes=10)
        (lat,) = [n for n in g["nodes"] if n["op"] == "parameter"]
        self.assertEqual(lat["attributes"]["shape"], [16, 128])
        self.assertEqual(lat["inputs"], ["m"])
        self.assertEqual(plan(g, batch=4)[0], parameters(m))

    def test_different_kdim_and_vdim_are_drawn_op_by_op(self):
        class Odd(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = nn.MultiheadAttention(64, 4, kdim=32, vdim=16, batch_first=True)

            def forward(self, x, k, v):
                return self.attn(x, k, v)[0].mean(1)

        with torch.device("meta"):
            m = Odd()
        # torch.fx refuses it (memcal's multihead_attention takes kdim = vdim); torch.export
        # draws nn.MultiheadAttention's own code op by op.
        g = export(m, [("x", ["B", 8, 64], "float32"), ("k", ["B", 8, 32], "float32"),
                       ("v", ["B", 8, 16], "float32")], name="odd", family="test", classes=4)
        self.assertFalse(any(n["op"] == "multihead_attention" for n in g["nodes"]))
        self.assertEqual(plan(g)[0], parameters(m))


if __name__ == "__main__":
    unittest.main()
