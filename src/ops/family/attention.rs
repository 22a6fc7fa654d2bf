//! The attention ops (`multihead_attention`, `gqa_attention`, `mla_attention`, `sdpa`): every
//! fact of each.

use super::Family;
use super::{prod, Intermediates, TextbookRole};
use super::{Attends, BiasSource, BiasedAttention};
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::*;
use crate::simulate::rules::{OpRule, Sizes};
use serde_json::Value;

/// Attributes of `multihead_attention`.
pub(super) fn parse_multihead_attention(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let embed_dim = a.size("embed_dim")?;
        let num_heads = a.size("num_heads")?;
        if !embed_dim.is_multiple_of(num_heads) {
            return Err(format!(
                "num_heads = {num_heads} must divide embed_dim = {embed_dim}"
            ));
        }
        let relative_attention_buckets = a.count_or("relative_attention_buckets", 0)?;
        let sdpa = a.one_of("backend", &[("eager", false), ("sdpa", true)], false)?;
        if sdpa && relative_attention_buckets > 0 {
            return Err("backend \"sdpa\" takes no relative_attention_buckets (a relative position bias is added to materialised scores: eager)".into());
        }
        let dropout = match a.get("dropout") {
            None => 0.0,
            Some(v) => v
                .as_f64()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| {
                    format!("attribute `dropout` must be a number in [0, 1), found {v}")
                })?,
        };
        let kdim = match a.get("kdim") {
            None => embed_dim,
            Some(_) => a.size("kdim")?,
        };
        let torch_impl = a.one_of("impl", &[("separate", false), ("torch", true)], false)?;
        let batch_first = a.flag_or("batch_first", true)?;
        if !batch_first && !torch_impl {
            return Err("batch_first: false takes impl \"torch\" (torch.nn.MultiheadAttention's own [T, B, E] layout)".into());
        }
        if torch_impl && !sdpa {
            return Err("impl \"torch\" takes backend \"sdpa\" (torch.nn.MultiheadAttention with need_weights=False; its eager path is not drawn yet)".into());
        }
        Op::MultiheadAttention {
            embed_dim,
            num_heads,
            head_dim: embed_dim / num_heads,
            causal: a.flag_or("causal", false)?,
            bias: a.flag_or("bias", true)?,
            relative_attention_buckets,
            sdpa,
            dropout,
            kdim,
            torch_impl,
            batch_first,
        }
    })
}

/// Attributes of `gqa_attention`.
pub(super) fn parse_gqa_attention(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let embed_dim = a.size("embed_dim")?;
        let num_heads = a.size("num_heads")?;
        let num_kv_heads = a.size("num_kv_heads")?;
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(format!(
                "num_kv_heads = {num_kv_heads} must divide num_heads = {num_heads}"
            ));
        }
        if a.map.get("head_dim").is_none() && !embed_dim.is_multiple_of(num_heads) {
            return Err(format!(
                "num_heads = {num_heads} must divide embed_dim = {embed_dim} (or give head_dim)"
            ));
        }
        // `bias`: false, true (all four projections) or "qkv" (q, k and v only).
        let (bias, out_bias) = match a.get("bias") {
            None => (false, false),
            Some(Value::Bool(b)) => (*b, *b),
            Some(Value::String(s)) if s == "qkv" => (true, false),
            Some(v) => {
                return Err(format!(
                    "attribute `bias` must be true, false or \"qkv\", found {v}"
                ))
            }
        };
        Op::GqaAttention {
            embed_dim,
            num_heads,
            num_kv_heads,
            head_dim: a.size_or("head_dim", embed_dim / num_heads)?,
            causal: a.flag_or("causal", true)?,
            bias,
            out_bias,
            repeat_kv: a.flag_or("repeat_kv", true)?,
            qk_norm: a.flag_or("qk_norm", false)?,
            sliding_window: a.count_or("sliding_window", 0)?,
        }
    })
}

/// Attributes of `mla_attention`.
pub(super) fn parse_mla_attention(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::MlaAttention {
        embed_dim: a.size("embed_dim")?,
        num_heads: a.size("num_heads")?,
        q_lora_rank: a.count_or("q_lora_rank", 0)?,
        kv_lora_rank: a.size("kv_lora_rank")?,
        qk_nope_head_dim: a.size("qk_nope_head_dim")?,
        qk_rope_head_dim: a.size("qk_rope_head_dim")?,
        v_head_dim: a.size("v_head_dim")?,
        causal: a.flag_or("causal", true)?,
    })
}

/// Attributes of `sdpa`.
pub(super) fn parse_sdpa(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Sdpa {
        causal: a.flag_or("causal", false)?,
        enable_gqa: a.flag_or("enable_gqa", false)?,
        sliding_window: a.count_or("sliding_window", 0)?,
    })
}

/// The attention layers (`multihead_attention`, `gqa_attention`, `mla_attention`) and `sdpa`.
pub(super) struct AttentionFamily;

impl Family for AttentionFamily {
    fn saves_weight_views(&self, _op: &Op) -> bool {
        true // its projections are `F.linear`s
    }

    /// Grouped-query attention, and multi-head self-attention through sdpa with its own q, k
    /// and v linears, split their heads; another attention has no split form drawn.
    fn tp_form(&self, op: &Op) -> super::TpForm {
        match op {
            Op::GqaAttention { .. } => super::TpForm::Heads,
            Op::MultiheadAttention {
                sdpa: true,
                torch_impl: false,
                relative_attention_buckets: 0,
                embed_dim,
                kdim,
                ..
            } if kdim == embed_dim => super::TpForm::Heads,
            Op::MultiheadAttention { .. } | Op::MlaAttention { .. } => super::TpForm::Unsplittable(
                "the tensor-parallel rule set splits grouped-query attention and sdpa self-attention with separate q/k/v linears; this attention is not drawn split",
            ),
            _ => super::TpForm::Replicated,
        }
    }

    /// The rank's heads (and key/value heads), each head as wide as before.
    fn tp_local(&self, op: &Op, role: super::TpRole, k: u64) -> Result<Op, String> {
        let mut op = op.clone();
        match (&mut op, role) {
            (
                Op::GqaAttention {
                    num_heads,
                    num_kv_heads,
                    ..
                },
                super::TpRole::Heads,
            ) => {
                *num_heads = super::tp_share("num_heads", *num_heads, k)?;
                *num_kv_heads = super::tp_share("num_kv_heads", *num_kv_heads, k)?;
            }
            (Op::MultiheadAttention { num_heads, .. }, super::TpRole::Heads) => {
                *num_heads = super::tp_share("num_heads", *num_heads, k)?;
            }
            _ => {}
        }
        Ok(op)
    }

    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::MultiheadAttention {
                embed_dim: d,
                kdim,
                batch_first,
                ..
            } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*d, "embed_dim")?;
                // The batch axis: 0, or 1 in torch's default [T, B, E] layout.
                let b = usize::from(!*batch_first);
                match inputs.get(1) {
                    Some(kv)
                        if kv.rank() != 3 || kv.0[b] != x.0[b] || kv.0[2] != Dim::fixed(*kdim) =>
                    {
                        return Err(if *batch_first {
                            format!("memory must be [{}, Tk, {kdim}] (kdim), found {kv}", x.0[0])
                        } else {
                            format!(
                                "memory must be [Tk, {}, {kdim}] (batch_first: false), found {kv}",
                                x.0[1]
                            )
                        });
                    }
                    None if kdim != d => {
                        return Err(format!("kdim = {kdim} differs from embed_dim = {d}: give the memory (a second input {kdim} wide)"));
                    }
                    _ => {}
                }
            }
            Op::GqaAttention { embed_dim: d, .. } | Op::MlaAttention { embed_dim: d, .. } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*d, "model width")?;
            }
            Op::Sdpa {
                causal, enable_gqa, ..
            } => sdpa_shape(*causal, *enable_gqa, inputs, ck, out)?,
            _ => unreachable!("not an attention op"),
        }
        Ok(())
    }

    /// The projections (and biases, relative position bias, q/k norms).
    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        match op {
            Op::MultiheadAttention {
                embed_dim: d,
                bias,
                kdim,
                torch_impl: true,
                ..
            } => {
                // torch.nn.MultiheadAttention's own: in_proj_weight [3d, d] (or q, k and v
                // weights when kdim is not d), in_proj_bias [3d], out_proj.
                if kdim == d {
                    p.push(vec![3 * d, *d]);
                } else {
                    p.extend([vec![*d, *d], vec![*d, *kdim], vec![*d, *kdim]]);
                }
                if *bias {
                    p.push(vec![3 * d]);
                }
                p.push(vec![*d, *d]);
                if *bias {
                    p.push(vec![*d]);
                }
            }
            Op::MultiheadAttention {
                embed_dim: d,
                num_heads,
                head_dim,
                bias,
                relative_attention_buckets,
                kdim,
                ..
            } => {
                // q, k, v to the heads' width (k and v from the memory's, kdim), out back to
                // d (its bias d wide).
                let inner = num_heads.saturating_mul(*head_dim);
                for (o, i) in [(inner, *d), (inner, *kdim), (inner, *kdim), (*d, inner)] {
                    p.push(vec![o, i]);
                    if *bias {
                        p.push(vec![o]);
                    }
                }
                if *relative_attention_buckets > 0 {
                    p.push(vec![*relative_attention_buckets, *num_heads]);
                }
            }
            Op::GqaAttention {
                embed_dim: d,
                num_heads,
                num_kv_heads,
                head_dim,
                bias,
                out_bias,
                qk_norm,
                ..
            } => {
                let q = num_heads.saturating_mul(*head_dim);
                let kv = num_kv_heads.saturating_mul(*head_dim);
                for (o, i, b) in [
                    (q, *d, *bias),
                    (kv, *d, *bias),
                    (kv, *d, *bias),
                    (*d, q, *out_bias),
                ] {
                    p.push(vec![o, i]);
                    if b {
                        p.push(vec![o]);
                    }
                }
                if *qk_norm {
                    // q_norm and k_norm: one weight of head_dim each, after the projections.
                    p.push(vec![*head_dim]);
                    p.push(vec![*head_dim]);
                }
            }
            Op::MlaAttention {
                embed_dim: d,
                num_heads: h,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
                ..
            } => {
                let qk = qk_nope_head_dim.saturating_add(*qk_rope_head_dim);
                let hqk = h.saturating_mul(qk);
                if *q_lora_rank > 0 {
                    p.push(vec![*q_lora_rank, *d]);
                    p.push(vec![*q_lora_rank]);
                    p.push(vec![hqk, *q_lora_rank]);
                } else {
                    p.push(vec![hqk, *d]);
                }
                p.push(vec![kv_lora_rank.saturating_add(*qk_rope_head_dim), *d]);
                p.push(vec![*kv_lora_rank]);
                p.push(vec![
                    h.saturating_mul(qk_nope_head_dim.saturating_add(*v_head_dim)),
                    *kv_lora_rank,
                ]);
                p.push(vec![*d, h.saturating_mul(*v_head_dim)]);
            }
            // sdpa: no trainable parameter.
            _ => {}
        }
    }

    /// q, k, v and context, and (eager multi-head attention) its B x h x Tq x Tk scores.
    fn intermediates(
        &self,
        op: &Op,
        x: &Shape,
        memory: Option<&Shape>,
        batch: u64,
    ) -> Intermediates {
        // Tokens: every leading element of a [..., d] input.
        let tokens = |width: u64| x.numel_at(batch) / width.max(1);
        let mut c = Intermediates::default();
        match op {
            Op::MultiheadAttention {
                num_heads,
                head_dim,
                sdpa,
                ..
            } => {
                let b = x.0[0].at(batch);
                let tq = x.0[1].at(batch);
                let tk = memory.map_or(tq, |s| s.0[1].at(batch));
                let d = num_heads.saturating_mul(*head_dim);
                // q, k, v, and the context entering the output projection.
                c.tensors = vec![
                    prod(&[b, tq, d]),
                    prod(&[b, tk, d]),
                    prod(&[b, tk, d]),
                    prod(&[b, tq, d]),
                ];
                // SDPA never materialises the [B,h,Tq,Tk] scores.
                c.scores = if *sdpa {
                    0
                } else {
                    prod(&[b, *num_heads, tq, tk])
                };
            }
            Op::GqaAttention {
                embed_dim,
                num_heads,
                num_kv_heads,
                head_dim,
                ..
            } => {
                let t = tokens(*embed_dim);
                c.tensors = vec![
                    prod(&[t, *num_heads, *head_dim]),
                    prod(&[t, *num_kv_heads, *head_dim]),
                    prod(&[t, *num_kv_heads, *head_dim]),
                    prod(&[t, *num_heads, *head_dim]),
                ];
            }
            Op::MlaAttention {
                embed_dim,
                num_heads: h,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
                ..
            } => {
                let t = tokens(*embed_dim);
                if *q_lora_rank > 0 {
                    c.tensors.push(prod(&[t, *q_lora_rank]));
                }
                c.tensors.extend([
                    prod(&[t, *h, qk_nope_head_dim.saturating_add(*qk_rope_head_dim)]),
                    prod(&[t, kv_lora_rank.saturating_add(*qk_rope_head_dim)]),
                    prod(&[t, *h, qk_nope_head_dim.saturating_add(*v_head_dim)]),
                    prod(&[t, *h, *v_head_dim]),
                ]);
            }
            // sdpa: its output alone.
            _ => {}
        }
        c
    }

    fn textbook(&self, op: &Op) -> TextbookRole {
        match op {
            Op::MultiheadAttention {
                embed_dim,
                num_heads,
                ..
            } => TextbookRole::EagerAttention {
                embed_dim: *embed_dim,
                num_heads: *num_heads,
            },
            Op::GqaAttention { .. } | Op::MlaAttention { .. } => TextbookRole::SdpaAttention,
            _ => TextbookRole::Covered,
        }
    }

    /// sdpa's mask.
    fn constant_only_input(&self, op: &Op) -> Option<usize> {
        matches!(op, Op::Sdpa { .. }).then_some(3)
    }

    fn projection_width(&self, op: &Op) -> Option<u64> {
        match op {
            Op::MultiheadAttention { embed_dim, .. }
            | Op::GqaAttention { embed_dim, .. }
            | Op::MlaAttention { embed_dim, .. } => Some(*embed_dim),
            _ => None,
        }
    }

    /// GQA-aware; MLA caches its latent and rope key. An attention drawn op by op (an
    /// exported graph's `sdpa` node) caches its k and v inputs, `[B, kv_heads, T, head_dim]`:
    /// k's heads and width (k as sdpa reads it: repeated to every query head where the graph
    /// repeats it).
    fn kv_cache(&self, op: &Op, key: Option<&Shape>) -> Option<(u64, u64, u64)> {
        Some(match op {
            Op::Sdpa { .. } => {
                let key = key?;
                if key.rank() != 4 {
                    return None;
                }
                (2, key.0[1].as_fixed()?, key.0[3].as_fixed()?)
            }
            Op::MultiheadAttention {
                num_heads,
                head_dim,
                ..
            } => (2, *num_heads, *head_dim),
            Op::GqaAttention {
                num_kv_heads,
                head_dim,
                ..
            } => (2, *num_kv_heads, *head_dim),
            Op::MlaAttention {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => (1, 1, kv_lora_rank + qk_rope_head_dim),
            _ => return None,
        })
    }

    fn attends(
        &self,
        op: &Op,
        n_inputs: usize,
        query: Option<&Shape>,
        key: Option<&Shape>,
    ) -> Option<Attends> {
        Some(match op {
            Op::MultiheadAttention { causal, .. } => {
                if n_inputs > 1 {
                    Attends::Cross(key?.0.get(1)?.as_fixed()?)
                } else if *causal {
                    Attends::CausalSelf
                } else {
                    Attends::Bidirectional
                }
            }
            Op::GqaAttention { causal, .. } | Op::MlaAttention { causal, .. } => {
                if *causal {
                    Attends::CausalSelf
                } else {
                    Attends::Bidirectional
                }
            }
            Op::Sdpa { causal, .. } => super::sdpa_attends(*causal, query, key)?,
            _ => return None,
        })
    }

    fn sliding_window(&self, op: &Op) -> Option<u64> {
        match *op {
            Op::GqaAttention { sliding_window, .. } | Op::Sdpa { sliding_window, .. } => {
                (sliding_window > 0).then_some(sliding_window)
            }
            _ => None,
        }
    }

    fn rotary_dims(&self, op: &Op) -> Option<u64> {
        match op {
            Op::GqaAttention { head_dim, .. } => Some(*head_dim),
            Op::MlaAttention {
                qk_rope_head_dim, ..
            } => Some(*qk_rope_head_dim),
            _ => None,
        }
    }

    /// transformers' rotary attention under no_grad (`LlamaAttention.forward` and its copies
    /// in Mistral, Mixtral, Qwen2/3, Gemma, OLMo, Phi-3): q, k and v projected;
    /// `apply_rotary_pos_emb` computes `(q * cos) + (rotate_half(q) * sin)`, whose highest
    /// point holds q, k, v and three q-sized temporaries (`q * cos`, `rotate_half(q)`, its
    /// product with `sin`; `rotate_half`'s `-x2` is half of one and gone by then), then the
    /// same for k; the cache's update copies k and v (the caches, in the level before the op);
    /// sdpa's output (q-sized) and its float32 logsumexp beside q; then `o_proj`.
    fn generate_peak(&self, op: &Op, at: &super::GenerateAt) -> Option<u64> {
        let (batch, tokens, cached) = (at.batch, at.tokens, at.cached);
        let Op::GqaAttention {
            embed_dim,
            num_heads,
            num_kv_heads,
            head_dim,
            qk_norm,
            ..
        } = *op
        else {
            return None;
        };
        let rows = batch * tokens;
        let q = rows * num_heads * head_dim * 4;
        let k = rows * num_kv_heads * head_dim * 4;
        let caches = if cached { 2 * k } else { 0 };
        // q_norm's own temporaries (the projection, x^2 and x*rstd) come before the rotation.
        let norm = if qk_norm { 3 * q } else { 0 };
        let rope_q = (4 * q + 2 * k).max(norm + 2 * k);
        let rope_k = 2 * q + 4 * k + k;
        let update = q + 2 * k + caches;
        let lse = batch * num_heads * tokens * 4;
        // With a mask (a sliding layer at its window): K and V repeated to every head (a
        // view with one kv head) and the mask made additive, beside sdpa's inputs.
        let masked = at.mask_kv.map_or(0, |kv| {
            let repeat = if num_kv_heads > 1 && num_kv_heads < num_heads {
                2 * batch * num_heads * kv * head_dim * 4
            } else {
                0
            };
            repeat + batch * tokens * kv * 4
        });
        let sdpa = q + q + lse + caches + masked;
        let y = rows * embed_dim * 4;
        let out = q + y + caches;
        Some(
            rope_q
                .max(rope_k)
                .max(update)
                .saturating_sub(caches)
                .max(sdpa.saturating_sub(caches))
                .max(out.saturating_sub(caches)),
        )
    }

    /// T5's first self-attention of each stack (`has_relative_attention_bias`).
    fn relative_position_bias_heads(&self, op: &Op) -> Option<u64> {
        match *op {
            Op::MultiheadAttention {
                num_heads,
                relative_attention_buckets,
                ..
            } if relative_attention_buckets > 0 => Some(num_heads),
            _ => None,
        }
    }

    /// `T5Attention.forward` with transformers 5's default sdpa under no_grad (under
    /// autograd the bias, a float mask needing a gradient, sends torch's sdpa to its math
    /// path, which the eager rule draws): q, and k and v of the projected tokens; at the
    /// stack's first layer `compute_bias` (its highest point in `_relative_position_bucket`,
    /// bidirectional: at `torch.min(if_large, full_like(...))`, six int64 `[Tq, Tk]` tensors
    /// (the caller's relative positions, the buckets so far, their absolute values, the
    /// large positions' buckets, the full tensor, the minimum) and the bool `is_small`; then
    /// the embedding's `[Tq, Tk, h]` output beside the relative positions and the buckets);
    /// then `create_position_bias_mask`'s `.contiguous()` (a copy of the permuted relative
    /// bias, none of a zeros bias) and the CPU flash kernel (its output like q, a float32
    /// `B x h x Tq` logsumexp, its per-thread scratch), then `o`.
    fn biased_sdpa_no_grad_peak(&self, op: &Op, at: &BiasedAttention) -> Option<(u64, u64)> {
        let Op::MultiheadAttention {
            embed_dim: d,
            num_heads: h,
            ..
        } = *op
        else {
            return None;
        };
        let e = 4;
        let q = at.batch * at.tq * d * e;
        let kv = 2 * at.batch * at.projected * d * e;
        let cells = at.tq * at.tk;
        let bias = h * cells * e;
        let (made, copy) = match at.bias {
            BiasSource::Relative => (bias, bias),
            BiasSource::Zeros => (bias, 0),
            BiasSource::Held { copied } => (0, if copied { bias } else { 0 }),
        };
        let buckets = if at.bias == BiasSource::Relative {
            (6 * cells * 8 + cells).max(2 * cells * 8 + bias)
        } else {
            made
        };
        let lse = at.batch * h * at.tq * 4;
        let scratch = crate::simulate::rules::flash_forward_scratch(at.tq, at.tk, d / h.max(1));
        let sdpa = made + copy + q + lse + scratch;
        let out = made + 2 * q;
        Some((q + kv + buckets.max(sdpa).max(out), made))
    }

    /// `T5Attention.forward` after the first step ("re-use all key/value_states from cache"),
    /// and BART's like it: q, the scores against the cached keys and their softmax, the
    /// context.
    fn cached_cross_attention_transient(
        &self,
        op: &Op,
        batch: u64,
        tokens: u64,
        kv_len: u64,
    ) -> Option<u64> {
        let Op::MultiheadAttention {
            embed_dim,
            num_heads,
            ..
        } = *op
        else {
            return None;
        };
        let q = batch * tokens * embed_dim * 4;
        let scores = batch * num_heads * tokens * kv_len * 4;
        Some(2 * q + 2 * scores)
    }

    /// The four projections of attention; MLA's projections.
    fn lora_targets(&self, op: &Op) -> usize {
        match op {
            Op::MultiheadAttention { .. } | Op::GqaAttention { .. } => 4,
            Op::MlaAttention { .. } => usize::MAX,
            _ => 0,
        }
    }

    /// The input's tokens; cross-attention's k and v projections read the memory's.
    fn lora_tokens(&self, op: &Op, s: &Sizes, j: usize, inp: u64) -> u64 {
        let b = s.dim(0);
        match op {
            Op::MultiheadAttention { embed_dim, .. } if j == 1 || j == 2 => s
                .shape_in(1)
                .map_or(s.rows(*embed_dim), |m| b * m.0[1].at(s.batch)),
            Op::MultiheadAttention { embed_dim, .. }
            | Op::GqaAttention { embed_dim, .. }
            | Op::MlaAttention { embed_dim, .. } => s.rows(*embed_dim),
            _ => s.rows(inp),
        }
    }

    fn is_eager_attention(&self, op: &Op) -> bool {
        matches!(op, Op::MultiheadAttention { sdpa: false, .. })
    }

    /// MLA's inner RMSNorms (q_a_norm, kv_a_norm) are frozen too: their `x * rstd` is not
    /// saved (see RMSNorm's), one `q_lora_rank` and one `kv_lora_rank` a token.
    fn lora_frozen_inner(&self, op: &Op, s: &Sizes, r: &mut OpRule) {
        if let Op::MlaAttention {
            embed_dim,
            q_lora_rank,
            kv_lora_rank,
            ..
        } = op
        {
            let unsaved = s.rows(*embed_dim) * (q_lora_rank + kv_lora_rank) * 4;
            shrink_internal(
                &mut r.saved,
                "q_a output",
                q_lora_rank * s.rows(*embed_dim) * 4,
            );
            shrink_internal(
                &mut r.saved,
                "kv_a output",
                kv_lora_rank * s.rows(*embed_dim) * 4,
            );
            r.forward_peak = r.forward_peak.map(|p| p.saturating_sub(unsaved));
        }
    }

    fn uses_cublaslt(&self, op: &Op) -> bool {
        matches!(
            op,
            Op::MultiheadAttention { bias: true, .. } | Op::GqaAttention { bias: true, .. }
        )
    }

    /// The relative position table (the last tensor).
    fn randn_init(&self, op: &Op, i: usize, count: usize) -> bool {
        match op {
            Op::MultiheadAttention {
                relative_attention_buckets,
                ..
            } => *relative_attention_buckets > 0 && i + 1 == count,
            _ => false,
        }
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        attention_rule(s)
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        match op {
            Op::Sdpa { .. } => operand_cast_rule(call, s, true),
            Op::MlaAttention { .. } => assumed_at_bf16(call, "assumed: the cpu-fp32 stages at bf16 (q/k and v head sizes differ: sdpa's memory-efficient path on CUDA, not derived)"),
            _ => cuda_attention_rule(s),
        }
    }

    fn runs_in_bf16(&self, _op: &Op) -> bool {
        true
    }
}

/// Scaled dot-product attention's shape: q's, with v's head size; the mask must broadcast
/// to the scores.
fn sdpa_shape(
    causal: bool,
    enable_gqa: bool,
    inputs: &[&Shape],
    ck: &Checks,
    out: &mut Shape,
) -> Result<(), String> {
    let x = ck.x;
    let (k, v) = (inputs[1], inputs[2]);
    let ok = x.rank() == 4
        && k.rank() == 4
        && v.rank() == 4
        && k.0[0] == x.0[0]
        && v.0[..3] == k.0[..3]
        && k.0[3] == x.0[3];
    if !ok {
        return Err(format!(
            "expected q [B, h, Tq, hd], k [B, kv, Tk, hd] and v [B, kv, Tk, hdv], found {x}, {k} and {v}"
        ));
    }
    let heads_match = if enable_gqa {
        x.0[1].divided_by(k.0[1]).is_some()
    } else {
        x.0[1] == k.0[1]
    };
    if !heads_match {
        return Err(format!(
            "k and v have {} heads and q {}: they must be equal, or divide q's with enable_gqa",
            k.0[1], x.0[1]
        ));
    }
    out.0[3] = v.0[3];
    if let Some(m) = inputs.get(3) {
        if causal {
            return Err("an sdpa with a mask takes causal: false (torch refuses an explicit attn_mask with is_causal; put causality in the mask)".into());
        }
        let scores = [x.0[0], x.0[1], x.0[2], k.0[2]];
        let fits = m.rank() == 4
            && m.0
                .iter()
                .zip(&scores)
                .all(|(a, b)| a == b || *a == Dim::fixed(1));
        if !fits {
            return Err(format!(
                "the mask {m} must broadcast to the scores [B, h, Tq, Tk] = [{}, {}, {}, {}] (each axis equal or 1)",
                scores[0], scores[1], scores[2], scores[3]
            ));
        }
    }
    Ok(())
}

/// Attention: multi-head (torch's own, sdpa and eager), grouped-query, multi-head latent and
/// bare sdpa.
fn attention_rule(s: &Sizes) -> OpRule {
    let batch = s.batch;
    let y = s.y();
    match &s.node.op {
        Op::MultiheadAttention { embed_dim: d, num_heads, bias, dropout, kdim, torch_impl: true, batch_first, .. } => {
            torch_mha_attention(s, y, [*d, *kdim, *num_heads], (*bias, *batch_first), *dropout > 0.0)
        }
        Op::MultiheadAttention { num_heads, head_dim, bias, sdpa: true, dropout, .. } if *dropout > 0.0 => {
            let tk = s.shape_in(1).map(|m| m.0[1].at(batch));
            sdpa_math_attention(s, y, num_heads * head_dim, *num_heads, *bias, tk)
        }
        Op::MultiheadAttention { embed_dim: d, num_heads, head_dim, bias, sdpa: true, .. } => sdpa_attention(
            s,
            y,
            [*d, *num_heads, *num_heads, *head_dim],
            (*bias, *bias),
            (true, false),
            "sdpa attention (backend \"sdpa\"): q, k, v projections (k and v of the memory for cross-attention), CPU flash sdpa: saves q, k, v, the output and B x H x Tq logsumexp, no B x H x Tq x Tk tensor; backward peaks in sdpa's backward with its per-thread scratch",
        ),
        Op::MultiheadAttention { sdpa: false, .. } => eager_attention_rule(s),
        Op::GqaAttention { embed_dim, num_heads, num_kv_heads, head_dim, bias, out_bias, repeat_kv, qk_norm, .. } => sdpa_attention(
            s,
            y,
            [*embed_dim, *num_heads, *num_kv_heads, *head_dim],
            (*bias, *out_bias),
            (*repeat_kv, *qk_norm),
            "q, k, v projections, k/v repeated to all heads, CPU flash sdpa: saves q, k, v, the output and B x H x T logsumexp; backward peaks in sdpa's backward with its per-thread scratch",
        ),
        Op::MlaAttention { .. } => mla_rule(s),
        Op::Sdpa { .. } => sdpa_rule(s),
        _ => unreachable!("attention_rule: not an attention op"),
    }
}

/// Multi-head attention run eagerly as the harness writes it (no sdpa).
fn eager_attention_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let e = s.e;
    use Saved::*;
    use Source::*;
    let Op::MultiheadAttention {
        embed_dim: d,
        num_heads,
        causal,
        relative_attention_buckets,
        bias,
        sdpa: false,
        dropout,
        ..
    } = &s.node.op
    else {
        unreachable!("eager_attention_rule: not eager attention")
    };
    let b = s.dim(0);
    let tq = s.dim(1);
    let tk = s.shape_in(1).map_or(tq, |m| m.0[1].at(batch));
    let aq = b * tq * d * e;
    let ak = b * tk * d * e;
    let sc = b * num_heads * tq * tk * e;
    let mut saved = vec![
        InputContiguous(0),
        Kept {
            what: "q (scaled, contiguous copy for bmm)",
            bytes: aq,
        },
        Kept {
            what: "k (contiguous copy for bmm)",
            bytes: ak,
        },
        Kept {
            what: "v (contiguous copy for bmm)",
            bytes: ak,
        },
        Internal {
            what: "attention weights B x H x Tq x Tk",
            bytes: sc,
        },
        Internal {
            what: "context (contiguous, out_proj input)",
            bytes: aq,
        },
    ];
    if node.inputs.len() > 1 {
        saved.push(InputContiguous(1));
    }
    if *causal {
        // A local of the harness's `if causal` block (gone by the end under no_grad).
        saved.push(Kept {
            what: "causal mask (bool Tq x Tk)",
            bytes: tq * tk,
        });
    }
    if *dropout > 0.0 {
        // Dropout on the probabilities: its float mask, and its output (what attn @ v
        // saves) beside the softmax output (what softmax's backward saves).
        saved.push(Internal {
            what: "dropout mask B x H x Tq x Tk (float)",
            bytes: sc,
        });
        saved.push(Internal {
            what: "dropped attention weights B x H x Tq x Tk",
            bytes: sc,
        });
    }
    let mut fwd = 2 * aq + 2 * ak + sc;
    // The bias and its bucket indices are locals of the harness's `if let` block: under
    // no_grad they are gone by the op's end.
    let fwd_no_grad = fwd;
    if *relative_attention_buckets > 0 {
        saved.push(Kept {
            what: "bucket indices (int64 Tq x Tk)",
            bytes: tq * tk * 8,
        });
        fwd += num_heads * tq * tk * e;
    }
    let grads = vec![Grad::New; node.inputs.len()];
    // Backward, stage by stage (derived from the harness's forward and torch's
    // backward formulas, checked against runs): out_proj (+ its input's gradient),
    // attn @ v (+ a copy of the gradient, the weights' and v's gradients, less the
    // context and incoming gradient already freed), softmax (+ the scores' gradient).
    let freed = aq
        .max((sc + ak).saturating_sub(aq))
        .max((2 * sc).saturating_sub(2 * aq));
    let held = aq.max(sc + ak).max((2 * sc).saturating_sub(aq));
    let o_proj = if *bias { vec![6, 7] } else { vec![3] };
    let mut r = OpRule::new(Output::New(aq), saved, grads, Measured)
        .fwd(fwd)
        .fwd_no_grad(fwd_no_grad)
        .note("eager attention as the harness runs it: saves input, q, k, v copies, B x H x Tq x Tk weights and the context; forward also holds q*scale, k, v projections, raw scores and the attention output until it returns; backward peaks at attn @ v or softmax");
    r.backward_peak = Some(BackwardPeak {
        freed,
        held,
        params: o_proj,
    });
    r
}

/// Multi-head latent attention (low-rank q and kv projections).
fn mla_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let e = s.e;
    let y = s.y();
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let Op::MlaAttention {
        embed_dim,
        num_heads: h,
        q_lora_rank: qr,
        kv_lora_rank: kvr,
        qk_nope_head_dim: nope,
        qk_rope_head_dim: rope,
        v_head_dim: v,
        causal,
    } = &s.node.op
    else {
        unreachable!("mla_rule: not MLA")
    };
    // Per token, in elements; `rows` is one element (an rms rstd).
    let t = s.rows(*embed_dim);
    let d = *embed_dim;
    let hq = h * (nope + rope);
    let hv = h * v;
    let hkv = h * (nope + v);
    let q_path = if *qr > 0 { 3 * qr + 1 } else { 0 };
    let kv_path = (kvr + rope) + 2 * kvr + 1;
    // Level once q, k and v exist: the saved normalisations, q (qp), kv_b's output
    // and k (the cat), all locals of the harness's forward until it returns.
    let l0 = q_path + hq + kv_path + hkv + hq;
    let bytes = |elements: u64| elements * t * e;
    let o_proj = vec![node.op.parameter_tensors().len() - 1];
    let mut saved = vec![
        InputContiguous(0),
        Internal {
            what: "q_a output, its rms normalisation, rstd and rms output",
            bytes: bytes(q_path),
        },
        Internal {
            what: "kv_a output (its split is normalised), rms normalisation, rstd and output",
            bytes: bytes(kv_path),
        },
    ];
    let mut r = if hq != hv {
        // CPU flash attention needs equal q/k and v head sizes: this runs sdpa's math
        // path, which saves scaled q and k copies, the B x H x T x T probabilities and
        // a v copy; the context is then copied for o_proj.
        let sc = h * s.dim(1);
        saved.extend([
            Internal {
                what: "scaled q and k (contiguous copies for bmm)",
                bytes: bytes(2 * hq),
            },
            Internal {
                what: "attention probabilities B x H x T x T",
                bytes: bytes(sc),
            },
            Internal {
                what: "v copy and context copy (o_proj input)",
                bytes: bytes(2 * hv),
            },
        ]);
        let mask = if *causal { s.dim(1) * s.dim(1) * 4 } else { 0 };
        let fwd = (l0 + 4 * hq + sc)
            .max(l0 + 3 * hq + 2 * sc + sc / 4)
            .max(l0 + 2 * hq + sc + 3 * hv + d);
        let freed = hv
            .max((sc + hv).saturating_sub(d))
            .max((2 * sc).saturating_sub(hv + d))
            .max((2 * hq).saturating_sub(hv + d));
        let held = hv
            .max(sc + hv)
            .max((2 * sc).saturating_sub(hv))
            .max((2 * hq).saturating_sub(hv));
        let mut r = OpRule::new(Output::New(y), saved, one, Measured).note(
            "q and kv low-rank projections with rms norms; q/k and v head sizes differ, so sdpa runs its math path (saves q and k copies, the B x H x T x T probabilities, a v copy); backward peaks in softmax's backward",
        );
        r.forward_peak = Some(bytes(fwd) + mask);
        r.backward_peak = Some(BackwardPeak {
            freed: bytes(freed),
            held: bytes(held),
            params: o_proj,
        });
        r
    } else {
        saved.extend([
            Internal {
                what: "q, kv_b output (v is a view of it), k",
                bytes: bytes(2 * hq + hkv),
            },
            Internal {
                what: "sdpa output (o_proj input) and logsumexp",
                bytes: bytes(hv + h),
            },
        ]);
        let mut r = OpRule::new(Output::New(y), saved, one, TorchSource).note(
            "q and kv low-rank projections with rms norms, CPU flash sdpa: saves every projection output, the normalisations, k, the output and logsumexp",
        );
        r.forward_peak = Some(bytes(l0 + hv + h + d));
        r.backward_peak = Some(BackwardPeak {
            freed: bytes((2 * hv + 2 * hq).saturating_sub(d).max(hv)),
            held: bytes(2 * hv + 2 * hq),
            params: o_proj,
        });
        r
    };
    r.forward_transient = 0;
    r
}

/// Bare scaled dot-product attention (CPU flash kernel).
fn sdpa_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let e = s.e;
    let y = s.y();
    use Saved::*;
    use Source::*;
    let Op::Sdpa { .. } = &s.node.op else {
        unreachable!("sdpa_rule: not sdpa")
    };
    let (b, h, tq) = (s.dim(0), s.dim(1), s.dim(2));
    let tk = s.shape_in(1).map_or(tq, |k| k.0[2].at(batch));
    let mut saved = vec![
        Input(0),
        Input(1),
        Input(2),
        Out,
        Internal {
            what: SDPA_LOGSUMEXP,
            bytes: b * h * tq * 4,
        },
    ];
    let mut grads = vec![Grad::New; 3];
    if node.inputs.len() > 3 {
        // The mask: sdpa turns a bool one into an additive one of q's dtype
        // (attention.cpp `convert_boolean_attn_mask`, a new tensor per call); the flash
        // kernel's backward takes it (derivatives.yaml), so it is saved.
        saved.push(if s.e_in(3) == 1 {
            Internal {
                what: SDPA_BOOL_MASK,
                bytes: s.n_in(3) * e,
            }
        } else {
            Input(3)
        });
        grads.push(Grad::None);
    }
    let mut rule = OpRule::new(Output::New(y), saved, grads, TorchSource)
    .bwd(flash_backward_scratch(tq, tk))
    .note("CPU flash sdpa (FlashAttentionKernel.cpp): the output is made like q (`empty_like`, _meta_registrations.py: contiguous for a contiguous q, [B, Tq, h, hd] returned transposed for q a transposed head view); saves q, k, v, the output and a B x H x Tq logsumexp, never the scores; backward makes q, k and v's gradients contiguous (not in a transposed view's layout) and holds its per-thread scratch");
    rule.output_contiguous = Some(false);
    rule.output_perm = Perm::new(&[0, 2, 1, 3]);
    rule.output_like_input = true;
    rule
}

/// Multi-head and grouped-query attention under autocast.
fn cuda_attention_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    use Source::*;
    match &node.op {
        Op::MultiheadAttention {
            sdpa: true,
            torch_impl: true,
            embed_dim,
            kdim,
            bias,
            ..
        } => {
            // torch.nn.MultiheadAttention's own forward: not derived for CUDA; the
            // separate-projection rule, with out_proj found in its packed parameter list.
            let mut r = gqa(s, node);
            if let Some(peak) = r.backward_peak.as_mut() {
                peak.params = torch_mha_out_proj(*embed_dim, *kdim, *bias);
            }
            r.source = Assumed;
            r
        }
        Op::MultiheadAttention { sdpa: true, .. } => gqa(s, node),
        Op::MultiheadAttention { .. } => mha(s, node),
        Op::GqaAttention { .. } => gqa(s, node),
        _ => unreachable!("attention_rule: not a multi-head or grouped-query attention"),
    }
}

/// Eager multi-head attention as the harness's `mha` runs it under autocast.
fn mha(s: &Sizes, node: &crate::graph::Node) -> OpRule {
    let Op::MultiheadAttention {
        embed_dim: d,
        num_heads: h,
        causal,
        relative_attention_buckets: nb,
        bias,
        ..
    } = &node.op
    else {
        unreachable!("mha rule for another op")
    };
    let (b, tq) = (s.dim(0), s.dim(1));
    let tk = s.shape_in(1).map_or(tq, |m| m.0[1].at(s.batch));
    let ex = s.e_in(0);
    let ekv = if node.inputs.len() > 1 { s.e_in(1) } else { ex };
    let (aq, ak, sc) = (b * tq * d * BF16, b * tk * d * BF16, b * h * tq * tk);
    let tt = tq * tk;
    let i = |v: u64| v as i64;
    // Casts of fp32 inputs: one per projection (activations are not cached).
    let cq = if ex == F32 { aq } else { 0 };
    let ckv = if ekv == F32 { 2 * ak } else { 0 };
    let mut saved = vec![];
    if cq + ckv > 0 {
        saved.push(Saved::Internal {
            what: "bf16 casts of the input for the q, k, v projections",
            bytes: cq + ckv,
        });
    }
    saved.extend([
        Saved::Internal {
            what: "q*scale (contiguous bf16 copy for bmm)",
            bytes: aq,
        },
        Saved::Internal {
            what: "k^T (contiguous bf16 copy for bmm)",
            bytes: ak,
        },
        Saved::Internal {
            what: "softmax output (float32 B x H x Tq x Tk)",
            bytes: sc * F32,
        },
        Saved::Internal {
            what: "bf16 cast of the attention weights (for attn @ v)",
            bytes: sc * BF16,
        },
        Saved::Internal {
            what: "v (contiguous bf16 copy for bmm)",
            bytes: ak,
        },
        Saved::Internal {
            what: "context (contiguous bf16, out_proj input)",
            bytes: aq,
        },
    ]);
    if node.inputs.len() > 1 {
        saved.push(Saved::Input(1));
    }
    let (mask, bucket) = (
        if *causal { tt } else { 0 },
        if *nb > 0 { tt * 8 } else { 0 },
    );
    if *causal {
        saved.push(Saved::Internal {
            what: "causal mask (bool Tq x Tk)",
            bytes: mask,
        });
    }
    if *nb > 0 {
        saved.push(Saved::Internal {
            what: "bucket indices (int64 Tq x Tk)",
            bytes: bucket,
        });
    }
    // Forward, in the harness's order; q, k, v projections, q*scale, the scores and the
    // context are Rust locals until the function returns.
    let rel = if *nb > 0 { h * tt * F32 } else { 0 };
    let fwd = high(&[
        i(cq + ckv),
        i(aq + 2 * ak),
        i(aq),
        i(aq + ak + sc * BF16),
        i(bucket + rel),
        -i(rel),
        i(mask + if *causal { sc * BF16 } else { 0 }),
        -i(if *causal { sc * BF16 } else { 0 }),
        i(2 * sc * F32),
        -i(sc * F32),
        i(sc * BF16 + ak + aq),
        i(aq),
        i(aq),
    ]);
    // Backward stages after the level before it (saved tensors and the incoming gradient):
    // out_proj, attn @ v, the weights' cast back, softmax, the scores' cast, masked_fill, the
    // bias, q @ k^T, q*scale.
    let wo = d * d * BF16 + if *bias { d * BF16 } else { 0 };
    let stages = |freed: bool| {
        high(&[
            i(aq + wo),
            -i(wo + aq + if freed { aq } else { 0 }),
            i(sc * BF16 + ak),
            -i(sc * BF16 + ak + aq),
            i(sc * F32),
            -i(sc * BF16),
            i(sc * F32),
            -i(2 * sc * F32),
            i(sc * BF16),
            -i(sc * F32),
            i(if *causal { sc * BF16 } else { 0 }),
            -i(if *causal { sc * BF16 + mask } else { 0 }),
            i(rel),
            -i(rel),
            i(aq + ak),
            -i(aq + ak + sc * BF16),
            i(aq),
        ])
    };
    let grads = if ex == F32 {
        vec![Grad::ViaCast(aq)]
    } else {
        vec![Grad::New]
    };
    let mut grads = grads;
    if node.inputs.len() > 1 {
        grads.push(if ekv == F32 {
            Grad::ViaCast(ak)
        } else {
            Grad::New
        });
    }
    let o_proj = if *bias { vec![6, 7] } else { vec![3] };
    let mut r = OpRule::new(Output::New(aq), saved, grads, Source::TorchSource)
        .fwd(fwd)
        .note("eager attention under autocast: bf16 projections (an fp32 input cast once per projection), bf16 scores, softmax in float32 (fp32_set_opt_dtype: a float32 copy of the scores, a float32 output saved), cast back to bf16 for attn @ v (saved); backward stage by stage through both casts");
    r.forward_transient = 0;
    r.forward_peak = Some(fwd);
    r.backward_peak = Some(BackwardPeak {
        freed: stages(true),
        held: stages(false),
        params: o_proj,
    });
    r.autocast = Some(CopySaved::IfInputRequiresGrad);
    r.cublas = true;
    r
}

/// Grouped-query attention: projections, k and v repeated to all heads, flash sdpa.
fn gqa(s: &Sizes, node: &crate::graph::Node) -> OpRule {
    match &node.op {
        Op::GqaAttention {
            embed_dim,
            num_heads,
            num_kv_heads,
            head_dim,
            bias,
            out_bias,
            repeat_kv,
            qk_norm,
            ..
        } => flash(
            s,
            [*embed_dim, *num_heads, *num_kv_heads, *head_dim],
            (*bias, *out_bias),
            (*repeat_kv, *qk_norm),
        ),
        // backend "sdpa": self- or cross-attention, as many kv heads as heads.
        Op::MultiheadAttention {
            embed_dim,
            num_heads,
            bias,
            sdpa: true,
            ..
        } => flash(
            s,
            [*embed_dim, *num_heads, *num_heads, embed_dim / num_heads],
            (*bias, *bias),
            (true, false),
        ),
        _ => unreachable!("sdpa rule for another op"),
    }
}

/// Takes `bytes` off the internal saved tensor whose description starts with `what`.
fn shrink_internal(saved: &mut [Saved], what: &str, bytes: u64) {
    for x in saved.iter_mut() {
        if let Saved::Internal { what: w, bytes: b } = x {
            if w.starts_with(what) {
                *b = b.saturating_sub(bytes);
            }
        }
    }
}

impl Op {
    /// The heads tensor parallel splits an attention over: its key/value heads under
    /// grouped-query attention, else its heads. None: not an attention.
    pub fn attention_heads(&self) -> Option<u64> {
        match self {
            Op::GqaAttention { num_kv_heads, .. } => Some(*num_kv_heads),
            Op::MultiheadAttention { num_heads, .. } | Op::MlaAttention { num_heads, .. } => {
                Some(*num_heads)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T5-small's attention (d 512, 8 heads) in the encoder at batch 4 and 256 tokens, against
    /// the per-op trace of transformers 5.24 on torch 2.11's CPU under the counting allocator
    /// (`python3 scripts/trace-generate-ops.py gen-t5-small 4 256 enc`): the highest point of
    /// each layer's `T5Attention.forward` over the level at its q projection, 12,780,544 bytes
    /// at layer 0 (which computes the bias; 1,024 bytes of position indices are not counted)
    /// and 10,683,392 at layer 1 (which copies it).
    #[test]
    fn t5_attention_under_no_grad_matches_its_trace() {
        let op = Op::MultiheadAttention {
            embed_dim: 512,
            num_heads: 8,
            head_dim: 64,
            causal: false,
            relative_attention_buckets: 32,
            bias: false,
            sdpa: false,
            dropout: 0.0,
            kdim: 512,
            torch_impl: false,
            batch_first: true,
        };
        let at = |bias| BiasedAttention {
            batch: 4,
            tq: 256,
            tk: 256,
            projected: 256,
            bias,
        };
        let f = AttentionFamily;
        let (first, made) = f
            .biased_sdpa_no_grad_peak(&op, &at(BiasSource::Relative))
            .unwrap();
        assert_eq!(made, 8 * 256 * 256 * 4);
        assert!(12_780_544 - first <= 4096, "{first}");
        let (later, made) = f
            .biased_sdpa_no_grad_peak(&op, &at(BiasSource::Held { copied: true }))
            .unwrap();
        assert_eq!((later, made), (10_683_392, 0));
        assert_eq!(f.relative_position_bias_heads(&op), Some(8));
    }
}
