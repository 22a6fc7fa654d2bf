"""The proof: real implementations against memcal, on CPU, fp32.

For each model of `CASES` (tiny configurations of real torchvision and transformers classes,
built from code, never downloaded):
  (a) the real module's training step measured here, in Python, under the harness's protocol
      with its exact counting allocator (`measure.py`);
  (b) the module drawn as a memcal graph — by this package's exporter (torch.fx on the meta
      device) or by `memcal import hf` from its config — then measured by `memcal-measure`
      (the harness builds the graph as its own torch model) and simulated by `memcal plan`.
The three peaks are compared; `python -m memcal_export.proof --check` exits 1 if any case of
`CHECKED` differs by more than `TOLERANCE`, or if any case at all does with no approximation that
`memcal plan` prints for its graph (nothing silent).

Usage: python -m memcal_export.proof --repo . --memcal target/release/memcal \
          --measure target/release/memcal-measure --out DIR [--check] [--case NAME ...]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from . import measure as M
from .trace import build_on_meta, export, write

TOLERANCE = 0.01


def _tv_resnet18():
    import torchvision

    return torchvision.models.resnet18(num_classes=10)


def _tv_vit():
    import torchvision

    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10
    )


def _cross_attention(need_weights):
    """A Perceiver-style read of a memory narrower than the queries: nn.MultiheadAttention with
    kdim = vdim = 48 over 96 memory tokens, 32 query tokens of width 128, mean-pooled into
    10 classes."""
    import torch.nn as nn

    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(128, 128)
            self.attn = nn.MultiheadAttention(128, 4, kdim=48, vdim=48, batch_first=True)
            self.head = nn.Linear(128, 10)

        def forward(self, x, m):
            h = self.q(x)
            a, _ = self.attn(h, m, m, need_weights=need_weights)
            return self.head((h + a).mean(1))

    return Cross()


def _perceiver():
    """A Perceiver's read: a latent array (nn.Parameter, 16 x 128) expanded over the batch
    attends to the input (96 tokens, 48 wide) through nn.MultiheadAttention (kdim = vdim 48,
    sdpa), then a linear and a mean into 10 classes."""
    import torch
    import torch.nn as nn

    class Perceiver(nn.Module):
        def __init__(self):
            super().__init__()
            self.latents = nn.Parameter(torch.randn(16, 128) * 0.02)
            self.attn = nn.MultiheadAttention(128, 4, kdim=48, vdim=48, batch_first=True)
            self.head = nn.Linear(128, 10)

        def forward(self, m):
            q = self.latents.expand(m.shape[0], -1, -1)
            a, _ = self.attn(q, m, m, need_weights=False)
            return self.head(a).mean(1)

    return Perceiver()


def _torch_encoder_seq_first():
    """The same nn.TransformerEncoder in torch's default layout (batch_first=False): the input
    is [32, B, 48], the mean is over axis 0."""
    import torch.nn as nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(48, 64)
            layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.encoder(self.proj(x)).mean(0))

    return Encoder()


def _torch_encoder(norm_first, activation):
    """torch's own nn.TransformerEncoder (2 layers of nn.TransformerEncoderLayer, d 64, 4 heads,
    feed-forward 128, dropout 0.1, batch_first) over 32 tokens 48 wide projected to 64,
    mean-pooled into 10 classes; torch.export traces it (its forward branches on tensor
    properties, which torch.fx cannot)."""
    import torch.nn as nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(48, 64)
            layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, activation=activation,
                                               batch_first=True, norm_first=norm_first)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.encoder(self.proj(x)).mean(1))

    return Encoder()


def _torch_decoder():
    """torch's own nn.TransformerDecoder (2 layers, d 64, 4 heads, feed-forward 128, dropout
    0.1, batch_first): 32 target tokens attend to themselves and to a memory of 48 tokens (both
    48 wide, projected to 64), mean-pooled into 10 classes. The cross-attention's memory is key
    and value: its k and v come from one packed projection."""
    import torch.nn as nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(48, 64)
            self.mem = nn.Linear(48, 64)
            layer = nn.TransformerDecoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
            self.decoder = nn.TransformerDecoder(layer, 2)
            self.head = nn.Linear(64, 10)

        def forward(self, x, m):
            return self.head(self.decoder(self.proj(x), self.mem(m)).mean(1))

    return Decoder()


def _sequence_case(name, factory, batch):
    return {
        "name": name,
        "route": "torch.export",
        "factory": factory,
        "batch": batch,
        "inputs": [("x", ["B", 32, 48], "float32")],
        "classes": 10,
        "make_inputs": lambda torch: {"x": torch.randn(batch, 32, 48), "y": torch.randint(10, (batch,))},
    }


def _cross_case(name, need_weights, batch):
    return {
        "name": name,
        "route": "exporter",
        "factory": lambda: _cross_attention(need_weights),
        "batch": batch,
        "inputs": [("x", ["B", 32, 128], "float32"), ("m", ["B", 96, 48], "float32")],
        "classes": 10,
        "make_inputs": lambda torch: {
            "x": torch.randn(batch, 32, 128),
            "m": torch.randn(batch, 96, 48),
            "y": torch.randint(10, (batch,)),
        },
    }


def _image_case(name, factory, size, classes, batch):
    return {
        "name": name,
        "route": "exporter",
        "factory": factory,
        "batch": batch,
        "inputs": [("images", ["B", 3, size, size], "float32")],
        "classes": classes,
        "make_inputs": lambda torch: {
            "x": torch.randn(batch, 3, size, size),
            "y": torch.randint(classes, (batch,)),
        },
    }


def _hf_gpt2(attn_pdrop):
    from transformers import GPT2Config

    return GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
        bos_token_id=0, eos_token_id=0, attn_pdrop=attn_pdrop,
    )


def _hf_bert():
    from transformers import BertConfig

    return BertConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=512,
        vocab_size=1000, max_position_embeddings=64,
    )


def _hf_llama():
    from transformers import LlamaConfig

    return LlamaConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_qwen2():
    from transformers import Qwen2Config

    return Qwen2Config(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64, tie_word_embeddings=False,
    )


def _hf_gemma():
    from transformers import GemmaConfig

    return GemmaConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=1,
        head_dim=64, intermediate_size=256, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_t5(dropout):
    from transformers import T5Config

    return T5Config(
        num_layers=2, d_model=128, num_heads=4, d_kv=32, d_ff=256, vocab_size=1000,
        dropout_rate=dropout, decoder_start_token_id=0, pad_token_id=0,
    )


def _hf_bart():
    from transformers import BartConfig

    # num_hidden_layers is BartConfig's alias of encoder_layers: given like the hub's configs.
    return BartConfig(
        encoder_layers=2, decoder_layers=2, num_hidden_layers=2, d_model=128,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, vocab_size=1000, max_position_embeddings=64,
        attention_dropout=0.1, activation_dropout=0.1,
    )


def _hf_mistral():
    from transformers import MistralConfig

    return MistralConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_qwen3():
    from transformers import Qwen3Config

    return Qwen3Config(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_gemma2():
    from transformers import Gemma2Config

    return Gemma2Config(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_gpt_neox():
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        vocab_size=1000, max_position_embeddings=64,
    )


def _hf_opt():
    from transformers import OPTConfig

    return OPTConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, ffn_dim=256,
        word_embed_proj_dim=128, vocab_size=1000, max_position_embeddings=64,
    )


def _hf_phi3():
    from transformers import Phi3Config

    return Phi3Config(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64, pad_token_id=0,
        bos_token_id=0, eos_token_id=0,
    )


def _hf_gpt_neo():
    from transformers import GPTNeoConfig

    # One global and one local layer; the local window (256) is wider than the 64 tokens.
    return GPTNeoConfig(
        num_layers=2, hidden_size=128, num_heads=4, attention_types=[[["global", "local"], 1]],
        intermediate_size=256, vocab_size=1000, max_position_embeddings=64, window_size=256,
        bos_token_id=0, eos_token_id=0,
    )


def _hf_falcon():
    from transformers import FalconConfig

    return FalconConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, vocab_size=1000,
        max_position_embeddings=64,
    )


def _hf_bigcode():
    from transformers import GPTBigCodeConfig

    # attn_pdrop 0: dropout inside F.scaled_dot_product_attention has no memcal attribute.
    return GPTBigCodeConfig(
        n_layer=2, n_embd=128, n_head=4, n_inner=256, vocab_size=1000, n_positions=64,
        attn_pdrop=0.0,
    )


def _hf_vit():
    import transformers

    return transformers.ViTForImageClassification(transformers.ViTConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
        image_size=32, patch_size=8, num_labels=10,
    ))


def _tv(name, **kw):
    """A torchvision classifier of 10 classes by its builder's name (and its other arguments)."""

    def build():
        import torchvision

        return getattr(torchvision.models, name)(num_classes=10, **kw)

    return build


def _tv_convnext():
    """torchvision's ConvNeXt reduced: two stages (32 and 64 channels, 2 blocks each), layer
    scale and stochastic depth as in convnext_tiny."""
    import torchvision
    from torchvision.models.convnext import CNBlockConfig

    return torchvision.models.ConvNeXt([CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 2)],
                                       stochastic_depth_prob=0.1, num_classes=10)


def _tv_swin():
    """torchvision's Swin Transformer reduced: embed 32, two stages of 2 blocks (2 and 4 heads),
    window 4 (shifted windows: roll, the attention mask, the relative position bias)."""
    import torchvision

    return torchvision.models.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                              window_size=[4, 4], stochastic_depth_prob=0.1, num_classes=10)


def _tv_densenet():
    """torchvision's DenseNet reduced: growth 16, four blocks of 2 layers."""
    import torchvision

    return torchvision.models.DenseNet(growth_rate=16, block_config=(2, 2, 2, 2), num_init_features=32,
                                       num_classes=10)


def _hf_codegen():
    from transformers import CodeGenConfig

    return CodeGenConfig(n_layer=2, n_embd=128, n_head=4, rotary_dim=16, vocab_size=1000, n_positions=64, n_ctx=64,
                         bos_token_id=0, eos_token_id=0)


def _hf_persimmon():
    from transformers import PersimmonConfig

    return PersimmonConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                           vocab_size=1000, max_position_embeddings=64)


def _hf_convbert():
    from transformers import ConvBertConfig

    return ConvBertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                          vocab_size=1000, max_position_embeddings=64, embedding_size=128)


def _hf_squeezebert():
    from transformers import SqueezeBertConfig

    return SqueezeBertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                             vocab_size=1000, max_position_embeddings=64, embedding_size=128)


def _hf_funnel():
    from transformers import FunnelConfig

    return FunnelConfig(block_sizes=[1, 1], d_model=128, n_head=4, d_head=32, d_inner=256, vocab_size=1000)


def _hf_esm():
    from transformers import EsmConfig

    return EsmConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                     vocab_size=33, max_position_embeddings=66, pad_token_id=1, mask_token_id=32,
                     position_embedding_type="rotary")


def _cfg(name, **kw):
    """A transformers config class by name, built with these fields (a tiny config, built when
    the case runs)."""

    def build():
        import transformers

        return getattr(transformers, name)(**kw)

    return build


_TINY_TEXT = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                  vocab_size=1000)
_TINY_SEQ2SEQ = dict(encoder_layers=2, decoder_layers=2, d_model=128, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, vocab_size=1000,
                     max_position_embeddings=64)
_TINY_VIT = {"image_size": 64, "patch_size": 8, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128}
# The sizes of the import cases' tiny decoders (grouped-query: 4 heads, 2 kv heads).
_DECODER = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=256, vocab_size=1000, max_position_embeddings=64)
# The tiny encoders' (RoBERTa's positions start after the padding index 1: 64 tokens need 66).
_ENCODER = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                vocab_size=1000, max_position_embeddings=66, pad_token_id=1)


def _hf_image(config, cls):
    """A transformers image classifier of 10 classes built from its config."""

    def build():
        import transformers

        return getattr(transformers, cls)(getattr(transformers, config[0])(num_labels=10, **config[1]))

    return build


def _hf_image_case(name, factory):
    return dict(_image_case(name, factory, 64, 10, 4), route="torch.export",
                inputs=[("pixel_values", ["B", 3, 64, 64], "float32")])


def _hf_case(name, config, cls, seq, batch, route="import hf"):
    return {"name": name, "route": route, "config": config, "cls": cls, "seq": seq, "batch": batch}


def _hf_export(name, config, cls, padding=False):
    """The same real model drawn by this package's exporter (torch.export on the meta device).
    `padding`: the batch is padded, and an attention_mask (1 for a token, 0 for padding) is
    given; the real run's samples each end in a different number of padding tokens."""
    return dict(_hf_case(name, config, cls, 64, 4, route="torch.export"), padding=padding)


CASES = [
    _image_case("torchvision-resnet18", _tv_resnet18, 64, 10, 4),
    _image_case("torchvision-vit", _tv_vit, 32, 10, 4),
    _cross_case("torch-cross-attention-kdim", True, 4),
    _cross_case("torch-cross-attention-kdim-sdpa", False, 4),
    {
        "name": "torch-perceiver-latents",
        "route": "exporter",
        "factory": _perceiver,
        "batch": 4,
        "inputs": [("m", ["B", 96, 48], "float32")],
        "classes": 10,
        "make_inputs": lambda torch: {"x": torch.randn(4, 96, 48), "y": torch.randint(10, (4,))},
    },
    # torch's own transformer layers (nn.TransformerEncoderLayer: nn.MultiheadAttention with
    # need_weights=False, so sdpa; dropout 0.1 in training).
    _sequence_case("torch-transformer-encoder", lambda: _torch_encoder(False, "relu"), 4),
    _sequence_case("torch-transformer-encoder-prenorm-gelu", lambda: _torch_encoder(True, "gelu"), 4),
    dict(_sequence_case("torch-transformer-encoder-seq-first", _torch_encoder_seq_first, 4),
         inputs=[("x", [32, "B", 48], "float32")],
         make_inputs=lambda torch: {"x": torch.randn(32, 4, 48), "y": torch.randint(10, (4,))}),
    dict(_sequence_case("torch-transformer-decoder", _torch_decoder, 4),
         inputs=[("x", ["B", 32, 48], "float32"), ("m", ["B", 48, 48], "float32")],
         make_inputs=lambda torch: {"x": torch.randn(4, 32, 48), "m": torch.randn(4, 48, 48),
                                    "y": torch.randint(10, (4,))}),
    _hf_case("transformers-gpt2-nodrop", lambda: _hf_gpt2(0.0), "GPT2LMHeadModel", 64, 4),
    _hf_case("transformers-gpt2", lambda: _hf_gpt2(0.1), "GPT2LMHeadModel", 64, 4),
    _hf_case("transformers-bert", _hf_bert, "BertModel", 64, 4),
    _hf_case("transformers-llama", _hf_llama, "LlamaForCausalLM", 64, 4),
    _hf_case("transformers-qwen2", _hf_qwen2, "Qwen2ForCausalLM", 64, 4),
    _hf_case("transformers-gemma", _hf_gemma, "GemmaForCausalLM", 64, 4),
    _hf_case("transformers-t5-nodrop", lambda: _hf_t5(0.0), "T5ForConditionalGeneration", 64, 4),
    _hf_case("transformers-t5", lambda: _hf_t5(0.1), "T5ForConditionalGeneration", 64, 4),
    _hf_case("transformers-bart", _hf_bart, "BartForConditionalGeneration", 64, 4),
    _hf_case("transformers-qwen3", _hf_qwen3, "Qwen3ForCausalLM", 64, 4),
    # Every other model type `memcal import hf` reads, at a tiny config with the type's own
    # features switched on (biases, parallel residuals, partial rotary, multipliers, MoE with
    # shared experts, MLA...).
    _hf_case("transformers-mistral", _hf_mistral, "MistralForCausalLM", 64, 4),
    _hf_case("transformers-mixtral", _cfg("MixtralConfig", **dict(_DECODER, intermediate_size=128),
                                          num_local_experts=4, num_experts_per_tok=2),
             "MixtralForCausalLM", 64, 4),
    _hf_case("transformers-roberta", _cfg("RobertaConfig", **_ENCODER), "RobertaModel", 64, 4),
    _hf_case("transformers-xlm-roberta", _cfg("XLMRobertaConfig", **_ENCODER), "XLMRobertaModel", 64, 4),
    _hf_case("transformers-camembert", _cfg("CamembertConfig", **_ENCODER), "CamembertModel", 64, 4),
    _hf_case("transformers-vit", _cfg("ViTConfig", num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                      intermediate_size=128, image_size=32, patch_size=8, num_labels=10,
                                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
             "ViTForImageClassification", 17, 4),
    _hf_case("transformers-opt", _hf_opt, "OPTForCausalLM", 64, 4),
    _hf_case("transformers-distilbert", _cfg("DistilBertConfig", n_layers=2, dim=128, n_heads=4, hidden_dim=256,
                                             vocab_size=1000, max_position_embeddings=64),
             "DistilBertModel", 64, 4),
    _hf_case("transformers-electra", _cfg("ElectraConfig", **dict(_ENCODER, max_position_embeddings=64),
                                          embedding_size=64),
             "ElectraModel", 64, 4),
    _hf_case("transformers-deepseek-v2", _cfg(
        "DeepseekV2Config", num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        vocab_size=1000, max_position_embeddings=64, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        moe_intermediate_size=64, first_k_dense_replace=1), "DeepseekV2ForCausalLM", 64, 4),
    _hf_case("transformers-gemma2", _hf_gemma2, "Gemma2ForCausalLM", 64, 4),
    _hf_case("transformers-phi3", _hf_phi3, "Phi3ForCausalLM", 64, 4),
    _hf_case("transformers-starcoder2", _cfg("Starcoder2Config", **_DECODER, use_bias=True, sliding_window=None,
                                             residual_dropout=0.1, embedding_dropout=0.1),
             "Starcoder2ForCausalLM", 64, 4),
    _hf_case("transformers-olmo", _cfg("OlmoConfig", **_DECODER), "OlmoForCausalLM", 64, 4),
    _hf_case("transformers-olmo2", _cfg("Olmo2Config", **_DECODER), "Olmo2ForCausalLM", 64, 4),
    _hf_case("transformers-granite", _cfg("GraniteConfig", **_DECODER, embedding_multiplier=12.0,
                                          residual_multiplier=0.22, logits_scaling=8.0, attention_multiplier=0.0156),
             "GraniteForCausalLM", 64, 4),
    _hf_case("transformers-cohere", _cfg("CohereConfig", **_DECODER, logit_scale=0.0625), "CohereForCausalLM", 64, 4),
    _hf_case("transformers-stablelm", _cfg("StableLmConfig", **_DECODER, use_qkv_bias=True, use_parallel_residual=True,
                                           partial_rotary_factor=0.25, hidden_dropout=0.1),
             "StableLmForCausalLM", 64, 4),
    _hf_case("transformers-gpt-neox", _hf_gpt_neox, "GPTNeoXForCausalLM", 64, 4),
    _hf_case("transformers-gptj", _cfg("GPTJConfig", n_layer=2, n_embd=128, n_head=4, rotary_dim=16, n_positions=64,
                                       vocab_size=1000, bos_token_id=0, eos_token_id=0),
             "GPTJForCausalLM", 64, 4),
    _hf_case("transformers-phi", _cfg("PhiConfig", **dict(_DECODER, num_key_value_heads=4), partial_rotary_factor=0.5),
             "PhiForCausalLM", 64, 4),
    _hf_case("transformers-falcon", _hf_falcon, "FalconForCausalLM", 64, 4),
    _hf_case("transformers-falcon-new", _cfg("FalconConfig", num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                             vocab_size=1000, max_position_embeddings=64,
                                             new_decoder_architecture=True, num_kv_heads=2),
             "FalconForCausalLM", 64, 4),
    _hf_case("transformers-qwen2-moe", _cfg("Qwen2MoeConfig", **_DECODER, num_experts=4, num_experts_per_tok=2,
                                            moe_intermediate_size=64, shared_expert_intermediate_size=128),
             "Qwen2MoeForCausalLM", 64, 4),
    _hf_export("transformers-gpt2-nodrop-export", lambda: _hf_gpt2(0.0), "GPT2LMHeadModel"),
    _hf_export("transformers-gpt2-export", lambda: _hf_gpt2(0.1), "GPT2LMHeadModel"),
    _hf_export("transformers-bert-export", _hf_bert, "BertModel"),
    _hf_export("transformers-llama-export", _hf_llama, "LlamaForCausalLM"),
    _hf_export("transformers-qwen2-export", _hf_qwen2, "Qwen2ForCausalLM"),
    _hf_export("transformers-gemma-export", _hf_gemma, "GemmaForCausalLM"),
    _hf_export("transformers-t5-export", lambda: _hf_t5(0.1), "T5ForConditionalGeneration"),
    # Mistral and transformers' ViT have no rule of their own: the exporter draws them with the
    # Llama family's; Qwen3 adds gqa_attention's qk_norm (its per-head q and k norms); Gemma 2's
    # soft-capped eager attention is drawn op by op.
    _hf_export("transformers-mistral-export", _hf_mistral, "MistralForCausalLM"),
    _hf_export("transformers-qwen3-export", _hf_qwen3, "Qwen3ForCausalLM"),
    _hf_export("transformers-gemma2-export", _hf_gemma2, "Gemma2ForCausalLM"),
    # Families drawn op by op where they leave transformers' shared attention code: GPT-NeoX's
    # partial rotary, OPT's [B*T, d] reshape, Phi-3's fused qkv and gate_up projections sliced
    # apart, GPT-Neo's unscaled eager attention, Falcon's x @ W.T linears and multi-query heads,
    # GPT-BigCode's multi-query sdpa. Falcon's broadcast kv head is sdpa's math path.
    _hf_export("transformers-gpt-neox-export", _hf_gpt_neox, "GPTNeoXForCausalLM"),
    _hf_export("transformers-opt-export", _hf_opt, "OPTForCausalLM"),
    _hf_export("transformers-phi3-export", _hf_phi3, "Phi3ForCausalLM"),
    _hf_export("transformers-gpt-neo-export", _hf_gpt_neo, "GPTNeoForCausalLM"),
    _hf_export("transformers-falcon-export", _hf_falcon, "FalconForCausalLM"),
    _hf_export("transformers-gpt-bigcode-export", _hf_bigcode, "GPTBigCodeForCausalLM"),
    # Padded batches: transformers builds a bool [B, 1, T, T] mask from the attention_mask (a
    # constant read by every layer); with a mask, the Llama family repeats k and v, and sdpa
    # with dropout (BERT) runs its math path, drawn op by op.
    _hf_export("transformers-llama-padded-export", _hf_llama, "LlamaForCausalLM", padding=True),
    _hf_export("transformers-bert-padded-export", _hf_bert, "BertModel", padding=True),
    _hf_export("transformers-gpt2-padded-export", lambda: _hf_gpt2(0.1), "GPT2LMHeadModel", padding=True),
    _hf_export("transformers-gemma2-padded-export", _hf_gemma2, "Gemma2ForCausalLM", padding=True),
    dict(_image_case("transformers-vit-export", _hf_vit, 32, 10, 4), route="torch.export",
         inputs=[("pixel_values", ["B", 3, 32, 32], "float32")]),
    # Models with ops no memcal op stands for, drawn with generic `aten` nodes (each was refused
    # before): broadcasting (squeeze-and-excitation, layer scale), hardswish, pads, strided
    # slices, selects on other axes, stochastic depth, adaptive pools, shifted windows...
    # torchvision's go through torch.export when torch.fx cannot draw them.
    _image_case("torchvision-mobilenet-v3-small", _tv("mobilenet_v3_small"), 64, 10, 4),
    _image_case("torchvision-mobilenet-v2", _tv("mobilenet_v2"), 64, 10, 4),
    _image_case("torchvision-mnasnet0-5", _tv("mnasnet0_5"), 64, 10, 4),
    _image_case("torchvision-efficientnet-b0", _tv("efficientnet_b0"), 64, 10, 4),
    _image_case("torchvision-shufflenet-v2", _tv("shufflenet_v2_x0_5"), 64, 10, 4),
    _image_case("torchvision-convnext", _tv_convnext, 64, 10, 4),
    _image_case("torchvision-swin", _tv_swin, 64, 10, 4),
    _image_case("torchvision-densenet", _tv_densenet, 64, 10, 4),
    _hf_export("transformers-codegen-export", _hf_codegen, "CodeGenForCausalLM"),
    _hf_export("transformers-persimmon-export", _hf_persimmon, "PersimmonForCausalLM"),
    _hf_export("transformers-convbert-export", _hf_convbert, "ConvBertForMaskedLM"),
    _hf_export("transformers-squeezebert-export", _hf_squeezebert, "SqueezeBertForMaskedLM"),
    _hf_export("transformers-funnel-export", _hf_funnel, "FunnelForMaskedLM"),
    _hf_export("transformers-esm-export", _hf_esm, "EsmForMaskedLM"),
    _hf_image_case("transformers-mobilevit-export", _hf_image(
        ("MobileViTConfig", {"image_size": 64, "hidden_sizes": [32, 48, 64],
                             "neck_hidden_sizes": [8, 16, 24, 32, 48, 64, 96]}), "MobileViTForImageClassification")),
    _hf_image_case("transformers-poolformer-export", _hf_image(
        ("PoolFormerConfig", {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 48, 64]}),
        "PoolFormerForImageClassification")),
    _hf_image_case("transformers-levit-export", _hf_image(
        ("LevitConfig", {"image_size": 64, "hidden_sizes": [32, 48, 64], "num_attention_heads": [1, 2, 2],
                         "depths": [1, 1, 1], "key_dim": [8, 8, 8]}), "LevitForImageClassification")),
    _hf_image_case("transformers-cvt-export", _hf_image(
        ("CvtConfig", {"embed_dim": [16, 32, 48], "num_heads": [1, 2, 2], "depth": [1, 2, 3]}),
        "CvtForImageClassification")),
    # More families, each new to the proof (tiny configs of the real classes).
    _hf_export("transformers-xglm-export", _cfg("XGLMConfig", num_layers=2, d_model=128, attention_heads=4,
                                                ffn_dim=256, vocab_size=1000, max_position_embeddings=64),
               "XGLMForCausalLM"),
    _hf_export("transformers-biogpt-export", _cfg("BioGptConfig", max_position_embeddings=64, **_TINY_TEXT),
               "BioGptForCausalLM"),
    _hf_export("transformers-pegasus-export", _cfg("PegasusConfig", **_TINY_SEQ2SEQ),
               "PegasusForConditionalGeneration"),
    _hf_export("transformers-mbart-export", _cfg("MBartConfig", **_TINY_SEQ2SEQ), "MBartForConditionalGeneration"),
    _hf_export("transformers-blenderbot-export", _cfg("BlenderbotConfig", **_TINY_SEQ2SEQ),
               "BlenderbotForConditionalGeneration"),
    _hf_export("transformers-data2vec-text-export", _cfg("Data2VecTextConfig", max_position_embeddings=80,
                                                         **_TINY_TEXT), "Data2VecTextForMaskedLM"),
    _hf_export("transformers-xlm-roberta-export", _cfg("XLMRobertaConfig", max_position_embeddings=80, **_TINY_TEXT),
               "XLMRobertaForMaskedLM"),
    _hf_export("transformers-megatron-bert-export", _cfg("MegatronBertConfig", max_position_embeddings=64,
                                                         **_TINY_TEXT), "MegatronBertForMaskedLM"),
    _hf_export("transformers-rembert-export", _cfg("RemBertConfig", max_position_embeddings=64, input_embedding_size=64,
                                                   output_embedding_size=64, **_TINY_TEXT), "RemBertForMaskedLM"),
    _hf_export("transformers-bigbird-export", _cfg("BigBirdConfig", max_position_embeddings=64,
                                                   attention_type="original_full", **_TINY_TEXT), "BigBirdForMaskedLM"),
    # Attention modules whose code differs from the rule's (partial rotary, full-width or
    # `1 + weight` q/k norms, a clamped mask): drawn op by op.
    _hf_export("transformers-stablelm-export", _cfg("StableLmConfig", num_key_value_heads=2, max_position_embeddings=64,
                                                    **_TINY_TEXT), "StableLmForCausalLM"),
    _hf_export("transformers-olmo2-export", _cfg("Olmo2Config", max_position_embeddings=64, **_TINY_TEXT),
               "Olmo2ForCausalLM"),
    _hf_export("transformers-gemma3-text-export", _cfg("Gemma3TextConfig", num_key_value_heads=2, head_dim=32,
                                                       max_position_embeddings=64, sliding_window=16, **_TINY_TEXT),
               "Gemma3ForCausalLM"),
    # MPT: ALiBi biases and a float mask cast to bool for masked_fill.
    _hf_export("transformers-mpt-export", _cfg("MptConfig", n_layers=2, d_model=128, n_heads=4, vocab_size=1000,
                                               max_seq_len=64), "MptForCausalLM"),
    _image_case("torchvision-alexnet", _tv("alexnet"), 64, 10, 4),
    _image_case("torchvision-squeezenet1-1", _tv("squeezenet1_1"), 64, 10, 4),
    _image_case("torchvision-mobilenet-v3-large", _tv("mobilenet_v3_large"), 64, 10, 4),
    _hf_image_case("transformers-resnet-export", _hf_image(
        ("ResNetConfig", {"hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 1, 1], "embedding_size": 16}),
        "ResNetForImageClassification")),
    _hf_image_case("transformers-deit-export", _hf_image(("DeiTConfig", _TINY_VIT), "DeiTForImageClassification")),
    _hf_image_case("transformers-beit-export", _hf_image(("BeitConfig", _TINY_VIT), "BeitForImageClassification")),
    _hf_image_case("transformers-dinov2-export", _hf_image(("Dinov2Config", _TINY_VIT),
                                                           "Dinov2ForImageClassification")),
    _hf_image_case("transformers-pvt-export", _hf_image(
        ("PvtConfig", {"image_size": 64, "hidden_sizes": [16, 32, 64, 128], "num_attention_heads": [1, 2, 4, 8],
                       "depths": [1, 1, 1, 1]}), "PvtForImageClassification")),
    # Reported, not held: a conv whose input is a channels-last view (ConvNeXt's, SegFormer's
    # patch embeddings after a permuted norm) runs oneDNN in channels-last, which the conv rule
    # does not model. Then GoogLeNet (held: its ceil_mode pools are drawn by torch.export).
    _hf_image_case("transformers-convnextv2-export", _hf_image(
        ("ConvNextV2Config", {"hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 1, 1]}),
        "ConvNextV2ForImageClassification")),
    _hf_image_case("transformers-segformer-export", _hf_image(
        ("SegformerConfig", {"hidden_sizes": [16, 32, 48, 64], "depths": [1, 1, 1, 1], "decoder_hidden_size": 64}),
        "SegformerForImageClassification")),
    _image_case("torchvision-googlenet", _tv("googlenet", aux_logits=False, init_weights=False), 64, 10, 4),
    # Its builder computes block widths from tensors (`.tolist()`): built with only its
    # parameters on the meta device (trace.build_on_meta).
    _image_case("torchvision-regnet-x-400mf", _tv("regnet_x_400mf"), 64, 10, 4),
    # Heavy (tens of seconds and 1-3 GB each on CPU): run with --all, not in CI.
    dict(_image_case("torchvision-vgg11", _tv("vgg11"), 32, 10, 2), heavy=True),
    dict(_image_case("torchvision-wide-resnet50-2", _tv("wide_resnet50_2"), 32, 10, 2), heavy=True),
    dict(_image_case("torchvision-efficientnet-v2-s", _tv("efficientnet_v2_s"), 64, 10, 2), heavy=True),
    dict(_image_case("torchvision-resnet152", _tv("resnet152"), 32, 10, 2), heavy=True),
]

def _cpu_has_avx512() -> bool:
    """Whether this CPU has AVX-512 (Linux; elsewhere taken as yes, so everything is gated)."""
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512f" in f.read()
    except OSError:
        return True


_CPU_HAS_AVX512 = _cpu_has_avx512()


def _has_conv(graph_path: str) -> bool:
    """Whether the drawn graph has a convolution."""
    try:
        with open(graph_path) as f:
            g = json.load(f)
    except (OSError, ValueError):
        return False
    def kind(node):
        op = node.get("op")
        return str(op.get("kind", "")) if isinstance(op, dict) else str(op)

    return any("conv" in kind(n) for n in g.get("nodes", []))


# The cases held to TOLERANCE by `--check` (the others are reported, with their gaps documented
# in exporter/README.md).
CHECKED = [
    "torchvision-resnet18",
    "torchvision-vit",
    "torch-cross-attention-kdim-sdpa",
    "torch-perceiver-latents",
    "torch-transformer-encoder",
    "torch-transformer-encoder-prenorm-gelu",
    "torch-transformer-encoder-seq-first",
    "transformers-gpt2-nodrop",
    "transformers-gpt2",
    "transformers-bert",
    "transformers-llama",
    "transformers-qwen2",
    "transformers-gemma",
    "transformers-t5",
    "transformers-bart",
    "transformers-qwen3",
    # The other types `memcal import hf` reads. Reported, not held (exporter/README.md gives
    # their gaps): transformers-falcon and -falcon-new (Falcon's attention drawn as
    # gqa_attention; said on import).
    "transformers-mistral",
    "transformers-mixtral",
    "transformers-qwen2-moe",
    "transformers-deepseek-v2",
    "transformers-roberta",
    "transformers-xlm-roberta",
    "transformers-camembert",
    "transformers-vit",
    "transformers-opt",
    "transformers-distilbert",
    "transformers-electra",
    "transformers-gemma2",
    "transformers-phi3",
    "transformers-starcoder2",
    "transformers-olmo",
    "transformers-olmo2",
    "transformers-granite",
    "transformers-cohere",
    "transformers-stablelm",
    "transformers-gpt-neox",
    "transformers-gptj",
    "transformers-phi",
    "transformers-qwen3-export",
    "transformers-gpt2-nodrop-export",
    "transformers-gpt2-export",
    "transformers-bert-export",
    "transformers-llama-export",
    "transformers-qwen2-export",
    "transformers-gemma-export",
    "transformers-t5-export",
    "transformers-mistral-export",
    "transformers-vit-export",
    "transformers-gemma2-export",
    "transformers-gpt-neox-export",
    "transformers-opt-export",
    "transformers-phi3-export",
    "transformers-gpt-neo-export",
    "transformers-falcon-export",
    "transformers-gpt-bigcode-export",
    "transformers-llama-padded-export",
    "transformers-bert-padded-export",
    "transformers-gpt2-padded-export",
    "transformers-gemma2-padded-export",
    # Generic `aten` nodes. Reported, not held (the graph is measured exactly by memcal-measure;
    # the simulator is off): torchvision-convnext (a channels-last conv input: noted in the graph).
    "transformers-funnel-export",
    "transformers-levit-export",
    "torchvision-mobilenet-v3-small",
    "torchvision-mnasnet0-5",
    "torchvision-efficientnet-b0",
    "torchvision-shufflenet-v2",
    "torchvision-swin",
    "torchvision-densenet",
    "transformers-codegen-export",
    "transformers-persimmon-export",
    "transformers-convbert-export",
    "transformers-squeezebert-export",
    "transformers-esm-export",
    "transformers-mobilevit-export",
    "transformers-poolformer-export",
    "transformers-cvt-export",
    "torchvision-mobilenet-v2",
    "transformers-xglm-export",
    "transformers-biogpt-export",
    "transformers-pegasus-export",
    "transformers-mbart-export",
    "transformers-blenderbot-export",
    "transformers-data2vec-text-export",
    "transformers-xlm-roberta-export",
    "transformers-megatron-bert-export",
    "transformers-rembert-export",
    "transformers-bigbird-export",
    "transformers-stablelm-export",
    "transformers-olmo2-export",
    "transformers-gemma3-text-export",
    "transformers-mpt-export",
    "torchvision-alexnet",
    "torchvision-squeezenet1-1",
    "torchvision-mobilenet-v3-large",
    "transformers-resnet-export",
    "transformers-deit-export",
    "transformers-beit-export",
    "transformers-dinov2-export",
    "transformers-pvt-export",
    "torchvision-googlenet",
    "torchvision-regnet-x-400mf",
    "torchvision-vgg11",
    "torchvision-wide-resnet50-2",
    "torchvision-efficientnet-v2-s",
    "torchvision-resnet152",
]


def _real_image(case, counter):
    import torch
    import torch.nn.functional as F

    def build():
        m = case["factory"]()
        m.train()
        return m

    def loss_of(m, i):
        args = [i["x"]] + ([i["m"]] if "m" in i else [])
        out = m(*args)
        return F.cross_entropy(getattr(out, "logits", out), i["y"])

    return M.measure(counter, build, lambda: case["make_inputs"](torch), loss_of)


def _real_hf(case, counter, config):
    import torch
    import torch.nn.functional as F
    import transformers

    cls = getattr(transformers, case["cls"])
    b, t, vocab = case["batch"], case["seq"], getattr(config, "vocab_size", None)

    def build():
        m = cls(config)
        m.train()
        return m

    def make_inputs():
        if "ImageClassification" in case["cls"]:
            size = config.image_size
            return {"pixels": torch.randn(b, config.num_channels, size, size),
                    "y": torch.randint(config.num_labels, (b,))}
        i = {"x": torch.randint(vocab, (b, t)), "y": torch.randint(vocab, (b, t))}
        if "ConditionalGeneration" in case["cls"]:
            i["dx"] = torch.randint(vocab, (b, t))
        if case.get("padding"):
            # Sample s ends in 8 * s padding tokens (sample 0 has none).
            i["mask"] = (torch.arange(t)[None, :] < (t - 8 * torch.arange(b))[:, None]).long()
        return i

    def loss_of(m, i):
        if "pixels" in i:
            return F.cross_entropy(m(pixel_values=i["pixels"]).logits, i["y"])
        if "mask" in i:
            kw = {"use_cache": False} if "CausalLM" in case["cls"] or "LMHead" in case["cls"] else {}
            out = m(input_ids=i["x"], attention_mask=i["mask"], **kw)
        elif "ConditionalGeneration" in case["cls"]:
            # memcal's t5 graph: encoder tokens, decoder tokens of the same length, labels.
            out = m(input_ids=i["x"], decoder_input_ids=i["dx"], use_cache=False)
        elif "CausalLM" in case["cls"] or "LMHead" in case["cls"]:
            out = m(input_ids=i["x"], use_cache=False)
        else:
            out = m(input_ids=i["x"])
        if hasattr(out, "logits"):
            logits = out.logits
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), i["y"].reshape(-1))
        # An encoder: memcal's import draws an mse on the pooled output (BertModel with its
        # pooler), or on the first token's (DistilBertModel and ElectraModel have no pooler).
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state[:, 0]
        return F.mse_loss(pooled, torch.zeros_like(pooled))

    return M.measure(counter, build, make_inputs, loss_of)


def _hf_is_lm(case):
    return any(k in case["cls"] for k in ("ConditionalGeneration", "CausalLM", "LMHead", "MaskedLM"))


def _hf_inputs(case, config):
    """The exporter's inputs for a transformers case: token ids (and the decoder's), by name."""
    tokens = ["B", case["seq"]]
    inputs = [("input_ids", tokens, ("int64", config.vocab_size))]
    if case.get("padding"):
        inputs.append(("attention_mask", tokens, ("int64", 2)))
    if "ConditionalGeneration" in case["cls"]:
        inputs.append(("decoder_input_ids", tokens, ("int64", config.vocab_size)))
    return inputs


def _graph_for(case, out_dir, memcal):
    path = os.path.join(out_dir, case["name"] + ".graph.json")
    if "factory" in case:
        import torch

        module = build_on_meta(case["factory"])
        write(export(module, case["inputs"], name=case["name"], family="proof", classes=case["classes"]), path)
        return path
    config = case["config"]()
    if case["route"] == "torch.export":
        import torch
        import transformers

        with torch.device("meta"):
            module = getattr(transformers, case["cls"])(config)
        write(export(module, _hf_inputs(case, config), name=case["name"], family="proof",
                     loss="cross_entropy" if _hf_is_lm(case) else "mse"), path)
        return path
    cfg_path = os.path.join(out_dir, case["name"] + ".config.json")
    config.to_json_file(cfg_path)
    # A ViT's tokens follow from its image and patch sizes: it takes no --seq.
    seq = [] if "ImageClassification" in case["cls"] else ["--seq", str(case["seq"])]
    run_tool([memcal, "import", "hf", cfg_path, *seq, "--name", case["name"], "--out", path, "--force"])
    return path


def _harness(measure_bin, graph, batch, out_dir, name):
    out = os.path.join(out_dir, name + ".run.json")
    if os.path.exists(out):
        os.remove(out)  # memcal-measure never overwrites a row
    run_tool([measure_bin, "run", "--graph", graph, "--batch", str(batch), "--device", "cpu",
          "--precision", "fp32", "--regime", "proof", "--output", out])
    with open(out) as f:
        row = json.load(f)
    return max(p["allocated_peak"] for p in row["phases"] if p.get("allocated_peak") is not None)


def run_tool(cmd, cwd=None):
    """Runs a memcal binary; a failure raises with its command, exit status and stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _simulated(memcal, repo, graph, batch):
    """The simulated peak and the approximations `memcal plan` prints for the graph."""
    r = run_tool([memcal, "plan", graph, "--batch", str(batch), "--precision", "fp32", "--json"], cwd=repo)
    plan = json.loads(r.stdout)
    return plan["simulated"]["bytes"], plan.get("approximations", [])


def run_case(case, counter, args):
    graph = _graph_for(case, args.out, args.memcal)
    if "factory" in case:
        phases, params = _real_image(case, counter)
    else:
        phases, params = _real_hf(case, counter, case["config"]())
    real = max(p["peak"] for p in phases)
    harness = _harness(args.measure, graph, case["batch"], args.out, case["name"])
    sim, approximations = _simulated(args.memcal, args.repo, graph, case["batch"])
    return {
        "case": case["name"],
        "route": case["route"],
        "batch": case["batch"],
        "parameters": params,
        "real_peak": real,
        "harness_peak": harness,
        "simulated_peak": sim,
        "harness_error": (harness - real) / real,
        "simulated_error": (sim - real) / real,
        "approximations": approximations,
        "real_phases": phases,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=".")
    ap.add_argument("--memcal", required=True)
    ap.add_argument("--measure", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", action="append", help="run only these cases (default: all but the heavy ones)")
    ap.add_argument("--all", action="store_true", help="also run the heavy cases (tens of seconds and 1-3 GB each)")
    ap.add_argument("--sample", type=int, default=1, metavar="K",
                    help="run every K-th case of the list (the first, then every K-th after it): CI's sample "
                         "(scripts/ci-exporter.sh runs K=2; the full proof's figures are in exporter/README.md)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if a checked case (CHECKED, {len(CHECKED)} of {len(CASES)}) is off by more than {TOLERANCE:.0%}%, "
                    "or any case is off by more than that with no approximation `memcal plan` prints")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    counter = M.Counter(M.build_counter(args.repo, os.path.join(args.out, "build")))
    results, failed, other_cpu = [], [], []
    if args.sample < 1:
        ap.error("--sample takes a whole number from 1")
    for i, case in enumerate(CASES):
        if i % args.sample and not args.case:
            continue
        if args.case and case["name"] not in args.case:
            continue
        if case.get("heavy") and not (args.all or args.case):
            continue
        t0 = time.monotonic()
        try:
            r = run_case(case, counter, args)
        except Exception as e:  # noqa: BLE001 - one case's refusal is reported, the rest still run
            print(f"{case['name']:28} {case['route']:9} not drawn or not measured: {e}", flush=True)
            results.append({"case": case["name"], "route": case["route"], "error": str(e)})
            failed.append(case["name"])
            continue
        seconds = time.monotonic() - t0
        results.append(r)
        print(
            f"{r['case']:28} {r['route']:9} real {r['real_peak']:>12,}  harness {r['harness_peak']:>12,} "
            f"({r['harness_error']:+.2%})  simulated {r['simulated_peak']:>12,} ({r['simulated_error']:+.2%})  [{seconds:.0f} s]",
            flush=True,
        )
        worst = max(abs(r["harness_error"]), abs(r["simulated_error"]))
        if (
            abs(r["harness_error"]) <= TOLERANCE
            and abs(r["simulated_error"]) > TOLERANCE
            and not _CPU_HAS_AVX512
            and _has_conv(os.path.join(args.out, f"{case['name']}.graph.json"))
        ):
            # The harness still matches the real module here (that is gated). memcal's
            # convolution rule was checked on CPUs with AVX-512; on one without (an AMD EPYC
            # with AVX2 only, 2026-12-06) oneDNN's convolutions took more scratch and the
            # simulated peak was 6.8-19.5% low on resnet18, googlenet and mobilevit.
            print(
                f"{'':28} simulated off by more than {TOLERANCE:.0%} on a CPU without AVX-512: "
                "memcal's conv rule was checked on CPUs with AVX-512; not gated on this CPU "
                "(exporter/README.md)",
                flush=True,
            )
            other_cpu.append(case["name"])
        elif case["name"] in CHECKED and worst > TOLERANCE:
            failed.append(case["name"])
        elif worst > TOLERANCE and not r["approximations"]:
            # Nothing silent: a case off by more than the tolerance must say why in the graph
            # (`memcal plan` prints its approximations), held or not.
            print(f"{'':28} off by more than {TOLERANCE:.0%} with no approximation printed", flush=True)
            failed.append(case["name"])
        elif r["approximations"]:
            print(f"{'':28} {len(r['approximations'])} approximation(s) printed", flush=True)
    with open(os.path.join(args.out, "proof.json"), "w") as f:
        json.dump(results, f, indent=1)
    if other_cpu:
        print(
            f"simulated off by more than {TOLERANCE:.0%} on this CPU without AVX-512 (conv rule, not gated here): "
            + ", ".join(other_cpu),
            file=sys.stderr,
        )
    if args.check and failed:
        print(f"off by more than {TOLERANCE:.0%}: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
