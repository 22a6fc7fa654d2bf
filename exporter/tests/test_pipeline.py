"""Pipeline parallelism in the per-rank campaign (`memcal_export.pipeline`, `ranks.py`'s `pp`):
the hand-made stage split against the unsplit transformers models, and a tiny two-block Llama
run by torch's GPipe and 1F1B schedules on two gloo ranks (loopback only), each rank with the
counting allocator. About 50 s on 2 cores."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from test_ranks import CONFIG, GRAPH, run_specs  # noqa: E402

LLAMA = dict(CONFIG, num_hidden_layers=2)
SPECS = ["pp:stages=2,micro=2,schedule=gpipe", "pp:stages=2,micro=2,schedule=1f1b"]
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


def job(spec, config=LLAMA, batch=BATCH):
    from memcal_export import ranks

    return {"graph_name": "tiny", "model": "tiny", "config": config, "graph": GRAPH, "batch": batch,
            "spec": spec, "world": ranks.world_of(spec), "tp": "llama"}


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

    def test_refusals(self):
        from memcal_export import pipeline as P
        from memcal_export import ranks

        self.assertEqual(P.shares(12, 5), [(0, 3), (3, 6), (6, 8), (8, 10), (10, 12)])
        cases = {
            ("pp:stages=4,micro=2,schedule=gpipe", 2): "4 stages but the model has 2 blocks",
            ("pp:stages=2,micro=2,schedule=gpipe", 3): "batch 3 is not 2 equal micro-batches",
            ("pp:stages=2,micro=1,schedule=1f1b", 2): "Schedule1F1B needs at least as many micro-batches",
            ("pp:micro=2,stages=2,schedule=gpipe", 2): "these keys, in this order",
            ("pp:stages=2,micro=2,schedule=zb", 2): "schedule=gpipe|1f1b",
        }
        for (spec, batch), why in cases.items():
            with self.assertRaises(ValueError) as e:
                ranks.run_job("unused.so", job(spec, batch=batch), "/nonexistent", 1)
            self.assertIn(why, str(e.exception))
        tied = dict(LLAMA, tie_word_embeddings=True)
        self.assertIn("tied", P.refusal(tied, SPECS[0], 2))
        self.assertEqual(ranks.parse_spec(SPECS[1]), ("pp", {"stages": 2, "micro": 2, "schedule": "1f1b"}))
        self.assertEqual(ranks.slug(SPECS[1]), "pp-stages2-micro2-schedule1f1b")


class PipelineRanksTest(unittest.TestCase):
    """Two ranks per schedule, against the plain step built here with the same seeds."""

    @classmethod
    def setUpClass(cls):
        import torch

        from memcal_export import campaign as C

        cls.tmp, cls.results = run_specs(SPECS, job)
        # The plain step (ranks.py's protocol: seed 0, the model; seed 1, the inputs; AdamW).
        torch.set_num_threads(1)
        model = build("llama", LLAMA)
        cls.plain_params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=False)
        torch.manual_seed(1)
        inputs = C.make_inputs(GRAPH, BATCH)
        cls.plain_losses = []
        for _ in range(3):
            loss = C.loss_of(GRAPH)(model, inputs)
            loss.backward()
            cls.plain_losses.append(loss.item())
            opt.step()
            opt.zero_grad(set_to_none=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_phases(self):
        names = ["model_load", "inputs"] + [f"step{k}.{p}" for k in (1, 2, 3) for p in ("pipeline", "optimizer")]
        for spec, ranks_ in self.results.items():
            for r in ranks_:
                self.assertEqual([p["name"] for p in r["phases"]], names, spec)

    def test_losses_are_the_plain_steps(self):
        # The last stage's micro-batch losses, averaged, are the plain step's loss at every
        # step: the same forward, and (steps 2 and 3) the same gradients and AdamW update.
        for spec, ranks_ in self.results.items():
            self.assertEqual(ranks_[0]["losses"], [])
            for k, (micro, plain) in enumerate(zip(ranks_[1]["losses"], self.plain_losses)):
                self.assertEqual(len(micro), 2)
                self.assertAlmostEqual(sum(micro) / 2, plain, delta=1e-5 * plain, msg=f"{spec} step {k + 1}")

    def test_each_rank_loads_its_stage_only(self):
        # After model_load a rank holds its stage's weights, 4 bytes a parameter, and its
        # buffers (the rotary embedding's two inv_freq vectors), and nothing else: the other
        # stages' modules are freed. Its peak was the whole model, built before the split.
        for spec, ranks_ in self.results.items():
            for r in ranks_:
                load = r["phases"][0]
                stage = r["stage"]
                self.assertEqual(stage["buffer_bytes"], 2 * 8 * 4)  # head_dim 16
                self.assertEqual(load["end"], 4 * stage["parameters"] + stage["buffer_bytes"], spec)
                # (The whole model has the one rotary embedding too.)
                self.assertEqual(load["peak"], 4 * self.plain_params + stage["buffer_bytes"], spec)
                self.assertEqual(r["parameters"], self.plain_params)  # the row's: the model built

    def test_stages_add_up_to_the_plain_model(self):
        for spec, ranks_ in self.results.items():
            self.assertEqual(sum(r["stage"]["parameters"] for r in ranks_), self.plain_params, spec)
            self.assertEqual([r["stage"]["blocks"] for r in ranks_], [[0, 1], [1, 2]], spec)

    def test_what_the_pipeline_holds_between_steps(self):
        # After a step's optimizer: the stage's weights and AdamW states, the inputs, and the
        # pipeline's own buffers: the first stage the M receive buffers of the gradients of its
        # outputs, the last stage the M receive buffers of its inputs' activations and the M
        # micro-batches' logits (output_chunks, kept for schedule.step's merged output).
        hidden = BATCH * 16 * 64 * 4
        logits = BATCH * 16 * 256 * 4
        inputs = 2 * BATCH * 16 * 8
        # AdamW's float32 step counters, one a parameter tensor: the embeddings and a block's 9
        # on stage 0; a block's 9, the norm and lm_head on stage 1.
        counters = (4 * 10, 4 * 11)
        for spec, (first, last) in self.results.items():
            for r, held, steps in ((first, hidden, counters[0]), (last, hidden + logits, counters[1])):
                params = r["stage"]["parameters"]
                states = 4 * params + r["stage"]["buffer_bytes"] + 8 * params
                for k in (3, 5, 7):  # step{1,2,3}.optimizer
                    self.assertEqual(r["phases"][k]["end"], states + inputs + held + steps, spec)

    def test_gpipe_holds_its_sent_activations_to_the_end(self):
        # Two stages, two micro-batches: stage 0 runs F0 F1 B0 B1 under both schedules
        # (Schedule1F1B's warm-up is min(M, S - stage) forwards), but ScheduleGPipe keeps the
        # works of its forward sends in a list until the step ends, and gloo's SendWork holds its
        # tensor: micro-batch 0's output is alive through B1. Schedule1F1B drops it before B1.
        # Stage 1 (F0 F1 B0 B1 against F0 B0 F1 B1) peaks at its last backward under both, once
        # every gradient exists: this tiny model's gradients outweigh a micro-batch's activations.
        gpipe, f1b = (self.results[s] for s in SPECS)
        one_micro = (BATCH // 2) * 16 * 64 * 4
        for k in (2, 4, 6):  # step{1,2,3}.pipeline
            self.assertEqual(gpipe[0]["phases"][k]["peak"] - f1b[0]["phases"][k]["peak"], one_micro)
            self.assertEqual(gpipe[1]["phases"][k]["peak"], f1b[1]["phases"][k]["peak"])


if __name__ == "__main__":
    unittest.main()
