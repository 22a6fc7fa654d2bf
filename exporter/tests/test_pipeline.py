"""Pipeline parallelism's stage split (`memcal_export.pipeline`) against the unsplit
transformers models: the stages, chained, give the same loss and gradients."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from test_ranks import CONFIG, GRAPH  # noqa: E402

LLAMA = dict(CONFIG, num_hidden_layers=2)
BATCH = 2

# Tiny configs of the other classes the campaign splits (4 blocks, dropout off).
DECODER = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
           "tie_word_embeddings": False}
OTHERS = {
    # A window shorter than the 16 tokens: the sliding-window mask differs from the causal one.
    "mistral": dict(DECODER, sliding_window=8),
    "mixtral": dict(DECODER, num_local_experts=4, num_experts_per_tok=2),
    "qwen3": dict(DECODER, head_dim=16),
    "bert": {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
             "num_attention_heads": 4, "max_position_embeddings": 64, "hidden_dropout_prob": 0.0,
             "attention_probs_dropout_prob": 0.0},
}
BERT_GRAPH = {
    "inputs": [
        {"name": "input_ids", "shape": ["B", 16], "dtype": "int64", "classes": 256},
        {"name": "token_type_ids", "shape": ["B", 16], "dtype": "int64", "classes": 2},
        {"name": "target", "shape": ["B", 64], "dtype": "float32"},
    ],
    "nodes": [{"id": "loss", "op": "mse"}],
    "loss": "loss",
}


def build(model_type, config):
    import torch
    import transformers

    from memcal_export import campaign as C

    torch.manual_seed(0)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    m = getattr(transformers, C.CLASSES[model_type])(transformers.AutoConfig.for_model(model_type, **fields))
    m.train()
    return m


class SplitTest(unittest.TestCase):
    """In one process: the stages, chained, are the unsplit model."""

    def check(self, model_type, config, graph, stages):
        import torch

        from memcal_export import campaign as C
        from memcal_export import pipeline as P

        torch.set_num_threads(1)
        whole = build(model_type, config)
        parts = build(model_type, config)  # the same weights (one seed), split
        torch.manual_seed(1)
        inputs = C.make_inputs(graph, BATCH)
        loss = C.loss_of(graph)(whole, inputs)
        loss.backward()
        mods = [P.split(parts, s, stages) for s in range(stages)]
        args, _ = P.stage_inputs(graph, inputs, 0, stages, mods[0])
        h = mods[0](*args)
        for m in mods[1:]:
            h = m(h)
        _, target = P.stage_inputs(graph, inputs, stages - 1, stages, mods[-1])
        split_loss = C.criterion(graph)[2](h, target)
        split_loss.backward()
        self.assertLess(abs(split_loss.item() - loss.item()), 1e-5 * abs(loss.item()), model_type)
        # Every parameter in exactly one stage, with the unsplit model's gradient.
        grads = dict(whole.named_parameters())
        kept = [p for m in mods for p in m.parameters()]
        self.assertEqual(len({id(p) for p in kept}), len(kept))
        self.assertEqual(sum(p.numel() for p in kept), sum(p.numel() for p in whole.parameters()))
        named = {n: p for n, p in parts.named_parameters()}
        for n, p in named.items():
            self.assertTrue(torch.allclose(p.grad, grads[n].grad, rtol=1e-4, atol=1e-6), f"{model_type} {n}")
        return mods

    def test_llama_two_stages(self):
        mods = self.check("llama", LLAMA, GRAPH, 2)
        self.assertIsNotNone(mods[0].embed_tokens)
        self.assertIsNone(mods[0].lm_head)
        self.assertIsNone(mods[1].embed_tokens)
        self.assertIsNotNone(mods[1].lm_head)

    def test_other_classes_three_stages(self):
        for model_type, config in OTHERS.items():
            graph = BERT_GRAPH if model_type == "bert" else GRAPH
            mods = self.check(model_type, config, graph, 3)
            # 4 blocks over 3 stages: the first stage takes the extra one.
            self.assertEqual([len(m.layers) for m in mods], [2, 1, 1], model_type)


if __name__ == "__main__":
    unittest.main()
