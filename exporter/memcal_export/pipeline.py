"""Pipeline parallelism's stage split for the per-rank campaign (`ranks.py`): the real
transformers model cut by hand into S stages of contiguous blocks, each a module that
`torch.distributed.pipelining.PipelineStage` runs (no tracer).

The spec is `pp:stages=S,micro=M,schedule=gpipe|1f1b` (these keys, in this order): S ranks, one
stage each; every step is one `schedule.step` over M micro-batches of batch/M rows
(`ScheduleGPipe`: all forwards, then all backwards; `Schedule1F1B`: S - stage warm-up
forwards, then one backward and one forward in turn).

The split. Every rank builds the whole model (the same seed, so the same weights on every rank)
and keeps its stage:
  - a decoder LM (`LlamaForCausalLM`, `MistralForCausalLM`, `MixtralForCausalLM`,
    `Qwen3ForCausalLM`, ...: `model.embed_tokens`, `model.layers`, `model.norm`, `lm_head`,
    `model.rotary_emb`): stage 0 the embeddings and its blocks, the last stage its blocks, the
    final norm and `lm_head`; every stage the rotary embedding (no parameters: its two
    `inv_freq` buffers). A stage computes the position ids, the rotary embeddings and the
    causal mask of its blocks' kind (full or sliding window) as the model's own forward does.
  - an encoder (`BertModel`: `embeddings`, `encoder.layer`, `pooler`): stage 0 the embeddings
    (fed the token ids and the token type ids) and its blocks, the last its blocks and the
    pooler; every stage the bidirectional mask as `BertModel` makes it.
Blocks are divided as evenly as possible, earlier stages taking the extra one. Each stage takes
one tensor (the hidden states; stage 0 the token ids, and BERT's token type ids) and returns one
(the hidden states; the last stage the logits or the pooled output). The loss on the last stage
is the plain step's (`campaign.criterion`): cross-entropy of the logits on `labels`, or the
mean squared error of the pooled output on `target`, per micro-batch; the schedule divides the
gradients by M, so that equal micro-batches give the plain step's gradients.

Refused (`refusal`): fewer than 2 stages, more stages than blocks, a batch M does not divide,
1F1B with fewer micro-batches than stages (torch's `Schedule1F1B` refuses it), and a decoder
whose `lm_head` is tied to its embeddings (`tie_word_embeddings`: the first and the last stage
would each hold the one weight, and torch's pipelining keeps no two copies in step).
"""

import re

import torch
# The import itself allocates a 4-byte tensor: made here, before a rank reads its baseline.
from torch.distributed import pipelining

from . import campaign as C

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
SPEC = re.compile(r"pp:stages=(\d+),micro=(\d+),schedule=([a-z0-9]+)")


def parse(spec):
    """`pp:stages=2,micro=4,schedule=1f1b` -> (2, 4, "1f1b"); anything else is refused."""
    m = SPEC.fullmatch(spec)
    if not m or m.group(3) not in SCHEDULES:
        raise ValueError(f"strategy `{spec}`: pipeline parallelism is "
                         f"pp:stages=S,micro=M,schedule={'|'.join(SCHEDULES)} (these keys, in this order)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def shares(blocks, stages):
    """The blocks of each stage, [start, end): as even as can be, earlier stages taking the extra."""
    q, r = divmod(blocks, stages)
    out, start = [], 0
    for s in range(stages):
        end = start + q + (1 if s < r else 0)
        out.append((start, end))
        start = end
    return out


def blocks_of(config):
    return config["num_hidden_layers"]


def refusal(config, spec, batch):
    """Why the run cannot be measured (a sentence), or None. `config`: the family's config as a
    dict (`campaign.merged_config`)."""
    try:
        stages, micro, schedule = parse(spec)
    except ValueError as e:
        return str(e)
    blocks = blocks_of(config)
    if stages < 2:
        return f"`{spec}`: a pipeline has at least 2 stages"
    if stages > blocks:
        return f"`{spec}`: {stages} stages but the model has {blocks} blocks"
    if micro < 1 or batch % micro:
        return f"`{spec}`: batch {batch} is not {micro} equal micro-batches"
    if schedule == "1f1b" and micro < stages:
        return f"`{spec}`: Schedule1F1B needs at least as many micro-batches as stages ({micro} < {stages})"
    causal_lm = C.CLASSES.get(config.get("model_type"), "").endswith("ForCausalLM")
    if causal_lm and config.get("tie_word_embeddings"):
        return (f"`{spec}`: lm_head is tied to the embeddings (tie_word_embeddings): the first and last "
                "stages would each hold the one weight, which torch's pipelining does not keep in step")
    return None


# ---------------------------------------------------------------------------------------------
# The stages.


class DecoderStage(torch.nn.Module):
    """Blocks [start, end) of a decoder LM, with the embeddings (stage 0) and the final norm and
    `lm_head` (the last stage)."""

    INPUTS = ("input_ids",)

    def __init__(self, model, start, end, first, last):
        super().__init__()
        inner = model.model
        self.config = inner.config
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(inner.layers[start:end])
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = model.lm_head if last else None
        types = getattr(self.config, "layer_types", None)
        default = "sliding_attention" if getattr(self.config, "sliding_window", None) else "full_attention"
        self.kinds = [types[i] if types else default for i in range(start, end)]

    def forward(self, x):
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        position_ids = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        makers = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
        masks = {kind: makers[kind](config=self.config, inputs_embeds=h, attention_mask=None, cache=None,
                                    position_ids=position_ids)
                 for kind in set(self.kinds)}
        position_embeddings = self.rotary_emb(h, position_ids=position_ids)
        for layer, kind in zip(self.layers, self.kinds):
            h = layer(h, attention_mask=masks[kind], position_embeddings=position_embeddings,
                      position_ids=position_ids, cache=None, use_cache=False)
        if self.norm is not None:
            h = self.lm_head(self.norm(h))
        return h


class EncoderStage(torch.nn.Module):
    """Blocks [start, end) of `BertModel`, with the embeddings (stage 0) and the pooler (the last
    stage)."""

    INPUTS = ("input_ids", "token_type_ids")

    def __init__(self, model, start, end, first, last):
        super().__init__()
        self.config = model.config
        self.embeddings = model.embeddings if first else None
        self.layers = torch.nn.ModuleList(model.encoder.layer[start:end])
        self.pooler = model.pooler if last else None
        if last and self.pooler is None:
            raise ValueError(f"{type(model).__name__} has no pooler: the loss is on the pooled output")

    def forward(self, x, token_type_ids=None):
        from transformers.masking_utils import create_bidirectional_mask

        if self.embeddings is not None:
            h = self.embeddings(input_ids=x, token_type_ids=token_type_ids)
        else:
            h = x
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=h, attention_mask=None)
        for layer in self.layers:
            h = layer(h, mask, None, encoder_attention_mask=None, cache=None)
        if self.pooler is not None:
            h = self.pooler(h)
        return h


def split(model, stage, stages):
    """Stage `stage` of `stages` of the model (its modules, shared with `model`: drop the model
    and only the stage's stay)."""
    if hasattr(model, "lm_head") and hasattr(getattr(model, "model", None), "layers"):
        kind, blocks = DecoderStage, len(model.model.layers)
        if stages > 1 and model.lm_head.weight is model.model.embed_tokens.weight:
            raise ValueError(f"{type(model).__name__}: lm_head is tied to the embeddings; pp refuses it")
    elif hasattr(model, "embeddings") and hasattr(getattr(model, "encoder", None), "layer"):
        kind, blocks = EncoderStage, len(model.encoder.layer)
    else:
        raise ValueError(f"{type(model).__name__}: pp splits decoder LMs (model.layers, lm_head) and "
                         "encoders (embeddings, encoder.layer, pooler)")
    if not 1 <= stages <= blocks:
        raise ValueError(f"{type(model).__name__}: {stages} stages of {blocks} blocks")
    start, end = shares(blocks, stages)[stage]
    return kind(model, start, end, stage == 0, stage == stages - 1)


def stage_inputs(graph, inputs, stage, stages, module):
    """(the positional inputs of stage 0, the loss's target on the last stage) from the graph's
    inputs; None where the stage takes none."""
    names = [i["name"] for i in graph["inputs"]]
    given = {C.KEYWORDS[n]: inputs[n] for n in names if n in C.KEYWORDS}
    if set(given) - set(module.INPUTS) or module.INPUTS[0] not in given:
        raise ValueError(f"graph inputs {sorted(given)}: a {type(module).__name__} takes {module.INPUTS}")
    args = tuple(given[k] for k in module.INPUTS if k in given) if stage == 0 else None
    target = inputs[C.criterion(graph)[1]] if stage == stages - 1 else None
    return args, target


def schedule_of(module, stage, stages, micro, schedule, loss_fn, group):
    """torch's PipelineStage over `module` and the schedule named."""
    ps = pipelining.PipelineStage(module, stage, stages, torch.device("cpu"), group=group)
    return getattr(pipelining, SCHEDULES[schedule])(ps, n_microbatches=micro, loss_fn=loss_fn)


def step(schedule, stage, stages, args, target, losses):
    """One `schedule.step`: stage 0 feeds the batch, the last the targets (the per-micro-batch
    losses into `losses`), the others nothing."""
    if stage == 0:
        schedule.step(*args)
    elif stage == stages - 1:
        schedule.step(target=target, losses=losses)
    else:
        schedule.step()
