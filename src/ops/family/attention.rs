//! The attention ops (`multihead_attention`, `gqa_attention`, `mla_attention`, `sdpa`): every
//! fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
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
    })
}

/// The attention layers (`multihead_attention`, `gqa_attention`, `mla_attention`) and `sdpa`.
pub(super) struct AttentionFamily;

impl Family for AttentionFamily {
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
            Op::Sdpa { causal, enable_gqa } => sdpa_shape(*causal, *enable_gqa, inputs, ck, out)?,
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
                bias,
                relative_attention_buckets,
                kdim,
                ..
            } => {
                // q, k, v, out: k and v take the memory's width (kdim) to d.
                for width in [*d, *kdim, *kdim, *d] {
                    p.push(vec![*d, width]);
                    if *bias {
                        p.push(vec![*d]);
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
