//! The inference protocol (`--strategy inference:prompt=P,decode=N`): no gradients; a prefill
//! of P tokens, then N greedy decode steps of one token each. Every attention layer has one
//! cache allocated for P + N tokens at the prefill (K and V `[B, kv_heads, P + N, head_dim]`;
//! MLA its compressed latent and rope key `[B, P + N, kv_lora_rank + rope]`), written in place
//! as tokens arrive. Causal self-attention decoders only (MHA without a relative bias, GQA, MLA).

use crate::builder::{Model, Module};
use memcal::graph::{DType, Graph};
use memcal::ops::Op;
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// One attention layer's cache.
enum Cache {
    Kv { k: Tensor, v: Tensor },
    Latent(Tensor),
}

/// Why a graph cannot run the inference protocol (None: it can).
pub fn unsupported(graph: &Graph) -> Option<String> {
    let mut attention = 0;
    for n in &graph.nodes {
        match &n.op {
            Op::MultiheadAttention {
                causal,
                relative_attention_buckets,
                ..
            } => {
                if !causal || *relative_attention_buckets > 0 || n.inputs.len() > 1 {
                    return Some(format!(
                        "node `{}`: inference needs causal self-attention without a relative bias (a decoder)",
                        n.id
                    ));
                }
                attention += 1;
            }
            Op::GqaAttention { causal, .. } | Op::MlaAttention { causal, .. } => {
                if !causal {
                    return Some(format!("node `{}`: attention is not causal", n.id));
                }
                attention += 1;
            }
            Op::Lstm(_) | Op::Gru(_) | Op::SelectToken { .. } => {
                return Some(format!(
                    "node `{}`: `{}` has no KV cache protocol",
                    n.id,
                    n.op.name()
                ))
            }
            _ => {}
        }
    }
    if attention == 0 {
        return Some("the graph has no attention op: no KV cache".into());
    }
    if token_input(graph).is_none() {
        return Some("no int64 token input read by an embedding".into());
    }
    None
}

/// The int64 input an embedding reads, and its vocabulary.
fn token_input(graph: &Graph) -> Option<(String, u64)> {
    graph.nodes.iter().find_map(|n| {
        let Op::Embedding { num_embeddings, .. } = n.op else {
            return None;
        };
        let name = n.inputs.first()?;
        let i = graph.inputs.iter().find(|i| &i.name == name)?;
        (i.dtype == DType::Int64).then(|| (name.clone(), num_embeddings))
    })
}

/// Random prompt tokens `[batch, prompt]`.
pub fn prompt_tokens(model: &Model, batch: u64, prompt: u64) -> anyhow::Result<Tensor> {
    let (_, vocab) = token_input(&model.graph).ok_or_else(|| anyhow::anyhow!("no token input"))?;
    Ok(Tensor::f_randint(
        vocab as i64,
        [batch as i64, prompt as i64],
        (Kind::Int64, model.device),
    )?)
}

/// The caches of every attention layer for `context` tokens.
fn allocate(model: &Model, batch: i64, context: i64) -> HashMap<usize, Cache> {
    let opts = (Kind::Float, model.device);
    let mut out = HashMap::new();
    for (k, m) in model.modules.iter().enumerate() {
        let c = match m {
            Module::Mha { q, heads, .. } => {
                let d = q.w.size()[1];
                let shape = [batch, *heads, context, d / heads];
                Cache::Kv {
                    k: Tensor::zeros(shape, opts),
                    v: Tensor::zeros(shape, opts),
                }
            }
            Module::Gqa {
                kv_heads, head_dim, ..
            } => {
                let shape = [batch, *kv_heads, context, *head_dim];
                Cache::Kv {
                    k: Tensor::zeros(shape, opts),
                    v: Tensor::zeros(shape, opts),
                }
            }
            Module::Mla { kv_rank, rope, .. } => {
                Cache::Latent(Tensor::zeros([batch, context, kv_rank + rope], opts))
            }
            _ => continue,
        };
        out.insert(k, c);
    }
    out
}

/// Attention over the cache: the new tokens' K and V written at `pos`, the queries attending
/// to every cached token up to theirs.
fn attend(m: &Module, x: &Tensor, cache: &mut Cache, pos: i64) -> Tensor {
    let (b, t) = (x.size()[0], x.size()[1]);
    let causal = t > 1;
    match (m, cache) {
        (
            Module::Mha {
                q, k, v, o, heads, ..
            },
            Cache::Kv { k: kc, v: vc },
        ) => {
            let d = x.size()[2];
            let hd = d / heads;
            let split = |y: Tensor| y.view([b, t, *heads, hd]).transpose(1, 2);
            kc.narrow(2, pos, t).copy_(&split(k.fwd(x)));
            vc.narrow(2, pos, t).copy_(&split(v.fwd(x)));
            let (kh, vh) = (kc.narrow(2, 0, pos + t), vc.narrow(2, 0, pos + t));
            let qh = split(q.fwd(x)) * (1.0 / (hd as f64).sqrt());
            let mut scores = qh.matmul(&kh.transpose(-2, -1));
            if causal {
                let tk = pos + t;
                let mask = Tensor::ones([t, tk], (Kind::Bool, x.device())).triu(1 + tk - t);
                scores = scores.masked_fill(&mask, f64::NEG_INFINITY);
            }
            let y = scores.softmax(-1, None::<Kind>).matmul(&vh);
            o.fwd(&y.transpose(1, 2).reshape([b, t, d]))
        }
        (
            Module::Gqa {
                q,
                k,
                v,
                o,
                heads,
                kv_heads,
                head_dim,
                ..
            },
            Cache::Kv { k: kc, v: vc },
        ) => {
            let split = |y: Tensor, h: i64| y.view([b, t, h, *head_dim]).transpose(1, 2);
            kc.narrow(2, pos, t).copy_(&split(k.fwd(x), *kv_heads));
            vc.narrow(2, pos, t).copy_(&split(v.fwd(x), *kv_heads));
            let rep = heads / kv_heads;
            let (mut kh, mut vh) = (kc.narrow(2, 0, pos + t), vc.narrow(2, 0, pos + t));
            if rep > 1 {
                kh = kh.repeat_interleave_self_int(rep, Some(1), None);
                vh = vh.repeat_interleave_self_int(rep, Some(1), None);
            }
            let qh = split(q.fwd(x), *heads);
            let y = Tensor::scaled_dot_product_attention::<Tensor>(
                &qh, &kh, &vh, None, 0.0, causal, None, false,
            );
            o.fwd(&y.transpose(1, 2).reshape([b, t, heads * head_dim]))
        }
        (
            Module::Mla {
                q_a,
                q,
                kv_a,
                kv_norm,
                kv_b,
                o,
                heads,
                nope,
                rope,
                v_dim,
                kv_rank,
                ..
            },
            Cache::Latent(lc),
        ) => {
            let h = *heads;
            let qp = match q_a {
                Some((qa, norm)) => {
                    let r = norm.size()[0];
                    q.fwd(&qa.fwd(x).rms_norm([r], Some(norm), None))
                }
                None => q.fwd(x),
            };
            let qh = qp.view([b, t, h, nope + rope]).transpose(1, 2);
            lc.narrow(1, pos, t).copy_(&kv_a.fwd(x));
            let all = lc.narrow(1, 0, pos + t);
            let tk = pos + t;
            let parts = all.split_with_sizes([*kv_rank, *rope], -1);
            let c = parts[0].rms_norm([*kv_rank], Some(kv_norm), None);
            let k_rope = parts[1]
                .view([b, tk, 1, *rope])
                .expand([b, tk, h, *rope], false);
            let kvb = kv_b.fwd(&c).view([b, tk, h, nope + v_dim]);
            let kv_parts = kvb.split_with_sizes([*nope, *v_dim], -1);
            let kh = Tensor::cat(&[&kv_parts[0], &k_rope], -1).transpose(1, 2);
            let vh = kv_parts[1].transpose(1, 2);
            let y = Tensor::scaled_dot_product_attention::<Tensor>(
                &qh, &kh, &vh, None, 0.0, causal, None, false,
            );
            o.fwd(&y.transpose(1, 2).reshape([b, t, h * v_dim]))
        }
        _ => panic!("attention module without its cache (harness bug)"),
    }
}

/// One forward over `tokens` at position `pos`: the logits (the loss node's first input).
fn step(
    model: &Model,
    tokens: &Tensor,
    caches: &mut HashMap<usize, Cache>,
    pos: i64,
    batch: u64,
) -> Tensor {
    let g = &model.graph;
    let (token_name, _) = token_input(g).expect("checked by `unsupported`");
    let loss_k = g
        .nodes
        .iter()
        .position(|n| n.id == g.loss)
        .expect("the loss is a node");
    let logits_name = g.nodes[loss_k].inputs[0].clone();
    let mut env: HashMap<String, Tensor> = HashMap::new();
    env.insert(token_name, tokens.shallow_clone());
    for (k, n) in g.nodes.iter().enumerate() {
        if k == loss_k {
            continue;
        }
        let args: Vec<&Tensor> = n.inputs.iter().map(|i| &env[i]).collect();
        let y = match (&n.op, &model.modules[k]) {
            (Op::LearnedPosition { .. }, Module::LearnedPosition(w)) => {
                args[0] + w.narrow(0, pos, args[0].size()[1])
            }
            (
                Op::MultiheadAttention { .. } | Op::GqaAttention { .. } | Op::MlaAttention { .. },
                m,
            ) => attend(m, args[0], caches.get_mut(&k).expect("allocated"), pos),
            _ => model.node(k, &n.op, &args, batch),
        };
        for name in &model.release_after[k] {
            if *name != logits_name {
                env.remove(name);
            }
        }
        env.insert(n.id.clone(), y);
    }
    env.remove(&logits_name).expect("the logits were computed")
}

/// The greedy next token of each sequence `[batch, 1]`.
fn next_token(logits: &Tensor) -> Tensor {
    logits.select(1, -1).argmax(-1, false).unsqueeze(1)
}

/// What the prefill leaves for the decode: the caches and the first generated token.
pub struct State {
    caches: HashMap<usize, Cache>,
    next: Tensor,
    pos: i64,
}

/// The prefill: allocates the caches for `prompt + decode` tokens and runs the prompt.
pub fn prefill(model: &Model, tokens: &Tensor, decode: u64, batch: u64) -> State {
    let _g = tch::no_grad_guard();
    let prompt = tokens.size()[1];
    let mut caches = allocate(model, batch as i64, prompt + decode as i64);
    let logits = step(model, tokens, &mut caches, 0, batch);
    State {
        next: next_token(&logits),
        caches,
        pos: prompt,
    }
}

/// `decode` steps of one token each.
pub fn decode(model: &Model, state: &mut State, decode: u64, batch: u64) {
    let _g = tch::no_grad_guard();
    for _ in 0..decode {
        let logits = step(model, &state.next, &mut state.caches, state.pos, batch);
        state.next = next_token(&logits);
        state.pos += 1;
    }
}
