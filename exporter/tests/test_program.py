"""Tests of the torch.export route (`memcal_export/program.py`): transformers models built from
their configs on the meta device, checked against `memcal import hf` (the other route) and
against published parameter counts, by memcal itself (`memcal plan`).

Run from the repository root (MEMCAL_BIN: the memcal binary):
  PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m unittest discover -s exporter/tests
"""

import json
import os
import subprocess
import tempfile
import unittest

import torch
import torch.nn as nn

from memcal_export import ExportError, export, write

MEMCAL = os.environ.get("MEMCAL_BIN", "target/debug/memcal")

try:
    import transformers
except ImportError:  # pragma: no cover - setup-pytorch.sh installs it
    transformers = None


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


def imported(config, seq):
    """The same model drawn by `memcal import hf` from its config.json."""
    with tempfile.TemporaryDirectory() as d:
        cfg, out = os.path.join(d, "config.json"), os.path.join(d, "g.json")
        config.to_json_file(cfg)
        r = subprocess.run([MEMCAL, "import", "hf", cfg, "--seq", str(seq), "--name", "imported", "--out", out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"memcal import hf failed: {r.stderr}")
        with open(out) as f:
            return json.load(f)


def exported(cls, config, seq, loss="cross_entropy", extra=()):
    with torch.device("meta"):
        m = getattr(transformers, cls)(config)
    inputs = [("input_ids", ["B", seq], ("int64", config.vocab_size))] + list(extra)
    return export(m, inputs, name="exported", family="test", loss=loss)


def ops(graph):
    return [n["op"] for n in graph["nodes"]]


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class BothRoutes(unittest.TestCase):
    """The exporter and `memcal import hf` draw the same model: the same ops, and memcal counts
    the same parameters and simulates the same peak for both."""

    def same(self, cls, config, seq=32, loss="cross_entropy", extra=(), drop_ops=()):
        g = exported(cls, config, seq, loss, extra)
        h = imported(config, seq)
        self.assertEqual([o for o in ops(g) if o not in drop_ops], ops(h))
        self.assertEqual(plan(g), plan(h))
        return g

    def test_gpt2_with_gelu_new_and_tied_head(self):
        g = self.same("GPT2LMHeadModel", transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=32))
        self.assertEqual(g["nodes"][-2]["attributes"]["tie"], "transformer.wte")
        attn = next(n for n in g["nodes"] if n["op"] == "multihead_attention")
        self.assertEqual(attn["attributes"], {"embed_dim": 64, "num_heads": 4, "causal": True, "bias": True,
                                              "backend": "sdpa", "dropout": 0.1})

    def test_bert_draws_its_token_type_buffer_as_an_input(self):
        g = self.same("BertModel", transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                           intermediate_size=128, vocab_size=500, max_position_embeddings=32),
                      loss="mse")
        self.assertEqual([i["name"] for i in g["inputs"]], ["input_ids", "token_type_ids", "target"])

    def test_llama_gqa_without_repeat(self):
        g = self.same("LlamaForCausalLM", transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=500, max_position_embeddings=32))
        attn = next(n for n in g["nodes"] if n["op"] == "gqa_attention")
        self.assertEqual(attn["attributes"], {"embed_dim": 64, "num_heads": 4, "num_kv_heads": 2, "repeat_kv": False})

    def test_qwen3_per_head_norms_are_qk_norm(self):
        g = self.same("Qwen3ForCausalLM", transformers.Qwen3Config(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=500, max_position_embeddings=32))
        attn = next(n for n in g["nodes"] if n["op"] == "gqa_attention")
        self.assertEqual(attn["attributes"]["qk_norm"], True)

    def test_t5_shares_its_embedding_between_the_stacks(self):
        # T5's tied head scales by d_model ** -0.5 before lm_head: a mul_scalar import hf omits
        # (it changes no peak: the product replaces the dropout output the head would save).
        g = self.same("T5ForConditionalGeneration", transformers.T5Config(
            num_layers=2, d_model=64, num_heads=4, d_kv=16, d_ff=128, vocab_size=500,
            decoder_start_token_id=0, pad_token_id=0), extra=[("decoder_input_ids", ["B", 32], ("int64", 500))],
            drop_ops=("unary",))
        embeddings = [n for n in g["nodes"] if n["op"] == "embedding"]
        self.assertEqual(embeddings[1]["attributes"]["tie"], embeddings[0]["id"])


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class FullSize(unittest.TestCase):
    """Published parameter counts, from configs built in code (no download), on the meta device."""

    def test_gpt2_small(self):
        self.assertEqual(plan(exported("GPT2LMHeadModel", transformers.GPT2Config(), 1024))[0], 124_439_808)

    def test_llama_2_7b(self):
        self.assertEqual(plan(exported("LlamaForCausalLM", transformers.LlamaConfig(), 256))[0], 6_738_415_616)


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class PaddingMasks(unittest.TestCase):
    """An attention_mask input: transformers builds one bool [B, 1, T, T] mask from it, which
    every layer's sdpa reads; with it, the Llama family repeats k and v (no enable_gqa)."""

    def cfg(self):
        return transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, vocab_size=500)

    def test_the_mask_is_one_bool_constant_read_by_every_sdpa(self):
        g = exported("LlamaForCausalLM", self.cfg(), 32, extra=[("attention_mask", ["B", 32], ("int64", 2))])
        masks = [n for n in g["nodes"] if n["op"] == "constant" and n["attributes"].get("dtype") == "bool"]
        self.assertEqual(len(masks), 1)
        self.assertEqual(masks[0]["inputs"], ["attention_mask"])
        self.assertEqual(masks[0]["attributes"]["shape"], ["B", 1, 32, 32])
        sdpas = [n for n in g["nodes"] if n["op"] == "sdpa"]
        self.assertEqual(len(sdpas), 2)
        for n in sdpas:
            self.assertEqual(n["inputs"][3], masks[0]["id"])
            self.assertNotIn("enable_gqa", n.get("attributes", {}))
        self.assertEqual(sum(n["op"] == "expand" for n in g["nodes"]), 4)  # repeat_kv of k and v, per layer

    def test_a_padded_batch_plans_more_than_an_unpadded_one(self):
        padded = plan(exported("LlamaForCausalLM", self.cfg(), 32, extra=[("attention_mask", ["B", 32], ("int64", 2))]))
        plain = plan(exported("LlamaForCausalLM", self.cfg(), 32))
        self.assertEqual(padded[0], plain[0])
        self.assertGreater(padded[1], plain[1])

    def test_t5s_position_bias_plus_a_padding_mask_is_drawn_op_by_op(self):
        # T5's attention rule takes no mask: the attentions that read the padding mask are
        # drawn op by op (generic `aten` nodes), their relative buckets included.
        cfg = transformers.T5Config(num_layers=1, num_decoder_layers=1, d_model=64, d_kv=16, d_ff=128,
                                    num_heads=4, vocab_size=500)
        with torch.device("meta"):
            m = transformers.T5ForConditionalGeneration(cfg)
        inputs = [("input_ids", ["B", 16], ("int64", 500)), ("attention_mask", ["B", 16], ("int64", 2)),
                  ("decoder_input_ids", ["B", 16], ("int64", 500))]
        g = export(m, inputs, name="t5", family="test")
        bias = [n for n in g["nodes"] if n["op"] == "aten" and n["attributes"]["target"] == "aten.embedding.default"]
        self.assertEqual([p["name"] for n in bias for p in n["attributes"]["params"]],
                         ["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"])
        self.assertEqual(plan(g)[0], sum(p.numel() for p in m.parameters()))

    def test_bert_with_attention_dropout_and_a_mask_is_the_math_path(self):
        cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                      intermediate_size=128, vocab_size=500, max_position_embeddings=32)
        g = exported("BertModel", cfg, 32, loss="mse", extra=[("attention_mask", ["B", 32], ("int64", 2))])
        drops = [n for n in g["nodes"] if n["op"] == "dropout" and n["id"].endswith("probs_dropout")]
        self.assertEqual(len(drops), 1)
        self.assertFalse(any(n["op"] in ("sdpa", "multihead_attention") for n in g["nodes"]))
        plan(g)


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class Notes(unittest.TestCase):
    """What a model computes that no memcal op draws is named, never dropped in silence."""

    def test_a_module_inside_an_attention_that_no_op_holds_is_noted_with_its_parameters(self):
        cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                       num_key_value_heads=2, intermediate_size=128, vocab_size=500)
        with torch.device("meta"):
            m = transformers.LlamaForCausalLM(cfg)
            for layer in m.model.layers:
                layer.self_attn.gate = nn.Linear(64, 4)  # in the module, read by nothing memcal draws
        with self.assertWarns(UserWarning) as w:
            g = export(m, [("input_ids", ["B", 32], ("int64", 500))], name="n", family="t")
        said = " ".join(str(x.message) for x in w.warnings)
        self.assertIn("`model.layers.*.self_attn.gate` (Linear) inside the attention is not drawn (2 places)", said)
        self.assertIn("520 parameters no memcal op holds", said)
        self.assertIn("520 parameters no memcal op holds", g["description"])
        self.assertEqual(plan(g)[0], sum(p.numel() for p in m.parameters()) - 520)


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup-pytorch.sh)")
class OpByOp(unittest.TestCase):
    """Attention code no memcal op stands for, drawn with matmul, slice, sdpa, constant, expand."""

    def test_gemma2_soft_capped_attention_is_drawn_op_by_op(self):
        cfg = transformers.Gemma2Config(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=16, intermediate_size=128, vocab_size=500)
        g = exported("Gemma2ForCausalLM", cfg, 32)
        self.assertNotIn("gqa_attention", ops(g))
        for op in ("matmul", "softmax", "constant", "expand", "slice"):
            self.assertIn(op, ops(g))
        self.assertIn({"fn": "tanh"}, [n.get("attributes") for n in g["nodes"] if n["op"] == "unary"])

    def test_phi3_reads_kv_heads_with_enable_gqa_and_its_fused_projections_as_slices(self):
        cfg = transformers.Phi3Config(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=128, vocab_size=500, pad_token_id=0, bos_token_id=0, eos_token_id=0)
        g = exported("Phi3ForCausalLM", cfg, 32)
        sdpa = [n for n in g["nodes"] if n["op"] == "sdpa"]
        self.assertEqual([n["attributes"] for n in sdpa], [{"causal": True, "enable_gqa": True}])
        self.assertNotIn("expand", ops(g))  # transformers' repeat_kv: the traced path only
        self.assertEqual(len([n for n in g["nodes"] if n["op"] == "slice" and n["inputs"][0].endswith("qkv_proj")]), 3)
        # The rotary covers the head: cat(q_embed, q[..., 32:]) is a concat of one piece.
        self.assertIn(1, [len(n["inputs"]) for n in g["nodes"] if n["op"] == "concat"])
        self.assertEqual(plan(g)[0], sum(p.numel() for p in transformers.Phi3ForCausalLM(cfg).parameters()))

    def test_falcon_broadcast_kv_head_is_sdpa_math_path(self):
        cfg = transformers.FalconConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, vocab_size=500)
        g = exported("FalconForCausalLM", cfg, 32)
        # One kv head broadcast over 4: torch's flash kernel refuses it, sdpa runs its math path.
        self.assertNotIn("sdpa", ops(g))
        for op in ("matmul", "softmax", "expand", "constant"):
            self.assertIn(op, ops(g))
        # FalconLinear's x @ W.T is a linear; k and v (x[..., [-2], :]) a slice and its copy.
        self.assertEqual(plan(g)[0], sum(p.numel() for p in transformers.FalconForCausalLM(cfg).parameters()))

    def test_opt_reshape_with_the_batch_merged_into_the_first_axis(self):
        cfg = transformers.OPTConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                                     word_embed_proj_dim=64, vocab_size=500, max_position_embeddings=32)
        g = exported("OPTForCausalLM", cfg, 32)
        self.assertIn([-1, 64], [n["attributes"]["shape"] for n in g["nodes"] if n["op"] == "reshape"])
        plan(g)


class Heads(nn.Module):
    """A fused qkv split by chunk, a constant table multiplied in, eager attention by matmul,
    then sdpa over the same heads."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(32, 96), nn.Linear(32, 32)
        self.register_buffer("table", torch.ones(16, 16))

    def forward(self, x):
        b = x.shape[0]
        q, k, v = (t.view(b, 16, 2, 16).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        q = q * self.table
        a = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        a = torch.nn.functional.scaled_dot_product_attention(a, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, 16, 32))[:, :, 8:24]


class Cumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        return self.fc2(torch.nn.functional.silu(self.norm(self.fc1(x))) * 0.5)


class AnyModule(unittest.TestCase):
    """tracer="export" takes any module, not only transformers'."""

    def test_a_plain_module_through_export_equals_fx(self):
        with torch.device("meta"):
            m = Plain()
        inputs = [("x", ["B", 16], "float32")]
        a = export(m, inputs, name="p", family="t", tracer="export")
        b = export(m, inputs, name="p", family="t", tracer="fx")
        self.assertEqual(ops(a), ["linear", "layer_norm", "silu", "unary", "linear", "cross_entropy"])
        self.assertEqual(ops(a), ops(b))
        self.assertEqual(plan(a), plan(b))

    def test_chunks_matmuls_a_constant_table_and_sdpa(self):
        with torch.device("meta"):
            m = Heads()
        g = export(m, [("x", ["B", 16, 32], "float32")], name="h", family="t", tracer="export", loss="mse")
        self.assertEqual(sorted(set(ops(g))), ["constant", "linear", "matmul", "mse", "mul", "permute", "reshape",
                                               "sdpa", "slice", "softmax"])
        self.assertEqual([n["attributes"] for n in g["nodes"] if n["op"] == "slice"][-1], {"dim": 2, "start": 8, "end": 24})
        self.assertEqual(plan(g)[0], 32 * 96 + 96 + 32 * 32 + 32)

    def test_torchs_transformer_encoder_goes_through_export_with_its_own_attention(self):
        class Encoder(nn.Module):
            def __init__(self, batch_first=True):
                super().__init__()
                layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=batch_first)
                self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.head = nn.Linear(32, 5)

            def forward(self, x):
                return self.head(self.encoder(x).mean(1))

        with torch.device("meta"):
            m = Encoder()
        g = export(m, [("x", ["B", 16, 32], "float32")], name="e", family="t", classes=5)  # auto: export
        attn = [n for n in g["nodes"] if n["op"] == "multihead_attention"]
        self.assertEqual(len(attn), 2)
        self.assertEqual(attn[0]["attributes"],
                         {"embed_dim": 32, "num_heads": 4, "causal": False, "bias": True, "backend": "sdpa",
                          "dropout": 0.1, "impl": "torch"})
        self.assertEqual(plan(g)[0], sum(p.numel() for p in m.parameters()))
        # torch's default layout, [T, B, E]: the same op with batch_first false, the mean over T.
        class SeqFirst(Encoder):
            def forward(self, x):
                return self.head(self.encoder(x).mean(0))

        with torch.device("meta"):
            seq_first = SeqFirst(batch_first=False)
        g = export(seq_first, [("x", [16, "B", 32], "float32")], name="e", family="t", classes=5)
        attn = [n for n in g["nodes"] if n["op"] == "multihead_attention"]
        self.assertEqual([a["attributes"].get("batch_first") for a in attn], [False, False])
        self.assertEqual(plan(g)[0], sum(p.numel() for p in seq_first.parameters()))

    def test_an_op_no_memcal_op_stands_for_is_a_generic_aten_node(self):
        with torch.device("meta"):
            m = Cumsum()
        g = export(m, [("x", ["B", 4, 8], "float32")], name="c", family="t", tracer="export")
        self.assertEqual(ops(g), ["linear", "aten", "cross_entropy"])
        self.assertEqual(g["nodes"][1]["attributes"]["target"], "aten.cumsum.default")
        self.assertEqual(plan(g)[0], sum(p.numel() for p in m.parameters()))


if __name__ == "__main__":
    unittest.main()
