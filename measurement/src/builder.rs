//! Builds a `memcal-graph/1` graph (as loaded and checked by [`memcal::graph::Graph`]) into a
//! tch model: parameters in a [`nn::VarStore`], a forward pass that walks the nodes in
//! topological order and returns the loss, and seeded synthetic inputs.
//!
//! Torch equivalents are those of `docs/graph-format.md`. Choices the format leaves open:
//! - `multihead_attention` relative position bias: bucket(i, j) = clamp(j - i, -(n/2),
//!   n - 1 - n/2) + n/2 for n buckets (query i, key j), a lookup into the `[n, heads]` table added
//!   to the scores. Causal masking hides keys j > i + (Tk - Tq).
//! - `mla_attention`: the rope part of q and k is carried as plain dimensions (no rotary
//!   rotation, which has no parameters and changes no tensor sizes).
//! - `moe`: softmax router, top-k, the k weights renormalised to sum to one (Mixtral), experts run
//!   on their routed tokens only and summed back with `index_add_`.
//! - Intermediate values are dropped after their last consumer, as a Python forward releases its
//!   locals; autograd keeps what backward needs.

use memcal::graph::{DType, Graph};
use memcal::ops::{Activation, ConstantDType, Op, ReshapeDim, UnaryFn};
use std::collections::HashMap;
use tch::nn::{self, Init};
use tch::{Device, Kind, Reduction, Tensor};

/// A learned linear map: `weight` is `[out, in]`; with LoRA, adapters `A` `[r, in]` and `B`
/// `[out, r]` (scale alpha/r = 1); with QLoRA, the weight packed as 4-bit NF4
/// ([`crate::nf4::Packed`]) and dequantized on every use.
pub(crate) struct Lin {
    pub(crate) w: Tensor,
    b: Option<Tensor>,
    pub(crate) lora: Option<(Tensor, Tensor)>,
    pub(crate) packed: Option<crate::nf4::Packed>,
}

impl Lin {
    fn new(p: &nn::Path, name: &str, inp: u64, out: u64, bias: bool) -> Lin {
        let q = p.sub(name);
        let w = q.var(
            "weight",
            &[out as i64, inp as i64],
            nn::init::DEFAULT_KAIMING_UNIFORM,
        );
        let b = bias.then(|| q.var("bias", &[out as i64], Init::Const(0.)));
        Lin {
            w,
            b,
            lora: None,
            packed: None,
        }
    }

    pub(crate) fn fwd(&self, x: &Tensor) -> Tensor {
        let base = match &self.packed {
            // The dequantized weight lives until this call returns (or, where autograd needs
            // it for the input's gradient, until the op's backward).
            Some(p) => x.linear(&p.dequantize(), self.b.as_ref()),
            None => x.linear(&self.w, self.b.as_ref()),
        };
        match &self.lora {
            Some((a, b)) => base + x.linear(a, None::<&Tensor>).linear(b, None::<&Tensor>),
            None => base,
        }
    }
}

pub(crate) enum Module {
    None,
    Linear(Lin),
    Embedding(Tensor),
    Conv {
        w: Tensor,
        b: Option<Tensor>,
        stride: i64,
        padding: i64,
        groups: i64,
    },
    ConvTranspose {
        w: Tensor,
        b: Option<Tensor>,
        stride: i64,
        padding: i64,
        output_padding: i64,
    },
    BatchNorm {
        w: Tensor,
        b: Tensor,
        mean: Tensor,
        var: Tensor,
    },
    LayerNorm {
        w: Tensor,
        b: Option<Tensor>,
        d: i64,
    },
    RmsNorm {
        w: Tensor,
        d: i64,
    },
    GroupNorm {
        w: Tensor,
        b: Tensor,
        groups: i64,
    },
    Mha {
        q: Lin,
        k: Lin,
        v: Lin,
        o: Lin,
        rel: Option<Tensor>,
        heads: i64,
        causal: bool,
        /// `backend: "sdpa"`: scaled_dot_product_attention instead of the eager form.
        sdpa: bool,
        /// sdpa's dropout_p (attribute `dropout`).
        dropout: f64,
    },
    /// torch.nn.MultiheadAttention's own forward (`impl: "torch"`, batch_first, sdpa).
    TorchMha {
        /// `in_proj_weight` [3E, E] (kdim = E), else q, k and v weights of their own.
        packed: Option<Tensor>,
        separate: Option<(Tensor, Tensor, Tensor)>,
        in_bias: Option<Tensor>,
        o: Lin,
        heads: i64,
        causal: bool,
        dropout: f64,
        /// False: torch's default `[T, B, E]` layout (no transposes).
        batch_first: bool,
    },
    Gqa {
        /// Repeat k and v to every head (else sdpa's `enable_gqa`).
        repeat_kv: bool,
        q: Lin,
        k: Lin,
        v: Lin,
        o: Lin,
        /// Qwen3's per-head RMS norms of q and k (their weights), before the attention.
        qk_norm: Option<(Tensor, Tensor)>,
        heads: i64,
        kv_heads: i64,
        head_dim: i64,
        causal: bool,
    },
    Mla {
        q_a: Option<(Lin, Tensor)>,
        q: Lin,
        kv_a: Lin,
        kv_norm: Tensor,
        kv_b: Lin,
        o: Lin,
        heads: i64,
        nope: i64,
        rope: i64,
        v_dim: i64,
        kv_rank: i64,
        causal: bool,
    },
    Moe {
        router: Lin,
        /// Per-expert w1, w3, w2 (empty for the grouped layout).
        experts: Vec<(Lin, Lin, Lin)>,
        /// The grouped layout's 3-D `gate_up_proj` `[E, 2 x hidden, dim]` and `down_proj`
        /// `[E, dim, hidden]`.
        grouped: Option<(Tensor, Tensor)>,
        top_k: i64,
        renormalize: bool,
    },
    Lstm(nn::LSTM),
    Gru(nn::GRU),
    LearnedPosition(Tensor),
    PrependToken(Tensor),
    /// A free learned tensor (attribute `shape`), broadcast over its input's batch.
    Parameter(Tensor),
    /// A generic `aten` node's parameters ([`crate::generic`]).
    Aten(crate::generic::AtenModule),
}

/// A graph built in tch.
pub struct Model {
    pub vs: nn::VarStore,
    /// LoRA/QLoRA adapters (the only trainable variables when present).
    pub adapters: Option<nn::VarStore>,
    pub(crate) graph: Graph,
    pub(crate) modules: Vec<Module>,
    /// For each node, the names of values whose last use is that node (dropped after it runs).
    pub(crate) release_after: Vec<Vec<String>>,
    pub(crate) device: Device,
}

/// The VarStore path of a node: tch paths may not contain dots.
fn path_name(id: &str) -> String {
    id.replace('.', "_")
}

/// A shape of `"B"` entries and sizes at `batch`.
fn sizes(shape: &[ReshapeDim], batch: u64) -> Vec<i64> {
    shape
        .iter()
        .map(|d| match d {
            ReshapeDim::Batch => i(batch),
            ReshapeDim::Fixed(n) => i(*n),
            ReshapeDim::Infer => -1,
        })
        .collect()
}

fn i(v: u64) -> i64 {
    v as i64
}

impl Model {
    /// Creates every parameter of the graph on `device`. Tied weights reuse the owner's tensor.
    pub fn build(graph: &Graph, device: Device) -> anyhow::Result<Model> {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut modules: Vec<Module> = Vec::with_capacity(graph.nodes.len());
        // Embedding tables first, so a tie can name an embedding that comes later in the order.
        let mut tables: HashMap<&str, Tensor> = HashMap::new();
        for n in &graph.nodes {
            if let Op::Embedding {
                num_embeddings,
                embedding_dim,
                tie: None,
            } = &n.op
            {
                let p = root.sub(path_name(&n.id));
                let w = p.var(
                    "weight",
                    &[i(*num_embeddings), i(*embedding_dim)],
                    Init::Randn {
                        mean: 0.,
                        stdev: 1.,
                    },
                );
                tables.insert(n.id.as_str(), w);
            }
        }
        let table = |node: &str, owner: &str| -> anyhow::Result<Tensor> {
            tables.get(owner).map(|t| t.shallow_clone()).ok_or_else(|| {
                anyhow::anyhow!(
                    "node `{node}`: tie `{owner}` is not an embedding that owns a table"
                )
            })
        };
        let mut shared = crate::generic::SharedParams::default();
        for n in &graph.nodes {
            let p = root.sub(path_name(&n.id));
            let m = match &n.op {
                Op::Linear {
                    in_features,
                    out_features,
                    bias,
                    tie,
                } => match tie {
                    None => Module::Linear(Lin::new(&p, "lin", *in_features, *out_features, *bias)),
                    Some(owner) => Module::Linear(Lin {
                        w: table(&n.id, owner)?,
                        b: bias.then(|| p.var("bias", &[i(*out_features)], Init::Const(0.))),
                        lora: None,
                        packed: None,
                    }),
                },
                Op::Embedding { tie, .. } => {
                    Module::Embedding(table(&n.id, tie.as_deref().unwrap_or(&n.id))?)
                }
                Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => conv_module(&p, &n.op),
                Op::BatchNorm { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::GroupNorm { .. } => norm_module(&p, &n.op),
                Op::MultiheadAttention { .. } | Op::GqaAttention { .. } => {
                    attention_module(&p, &n.op)
                }
                Op::MlaAttention { .. } => mla_module(&p, &n.op),
                Op::Moe { .. } => moe_module(&p, &n.op),
                Op::Lstm(r) | Op::Gru(r) => {
                    let cfg = nn::RNNConfig {
                        num_layers: i(r.num_layers),
                        bidirectional: r.bidirectional,
                        batch_first: true,
                        has_biases: true,
                        ..Default::default()
                    };
                    if matches!(n.op, Op::Lstm(_)) {
                        Module::Lstm(nn::lstm(&p, i(r.input_size), i(r.hidden_size), cfg))
                    } else {
                        Module::Gru(nn::gru(&p, i(r.input_size), i(r.hidden_size), cfg))
                    }
                }
                Op::LearnedPosition { num_positions, dim } => Module::LearnedPosition(p.var(
                    "weight",
                    &[i(*num_positions), i(*dim)],
                    Init::Randn {
                        mean: 0.,
                        stdev: 0.02,
                    },
                )),
                Op::PrependToken { dim } => Module::PrependToken(p.var(
                    "token",
                    &[1, 1, i(*dim)],
                    Init::Randn {
                        mean: 0.,
                        stdev: 0.02,
                    },
                )),
                Op::Parameter { shape } => Module::Parameter(p.var(
                    "weight",
                    &shape.iter().map(|&d| i(d)).collect::<Vec<i64>>(),
                    Init::Randn {
                        mean: 0.,
                        stdev: 0.02,
                    },
                )),
                Op::Aten(a) => Module::Aten(shared.module(&root, &n.id, a)?),
                _ => Module::None,
            };
            modules.push(m);
        }

        // Last use of every value, to release intermediates as a Python forward would.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (k, n) in graph.nodes.iter().enumerate() {
            for inp in &n.inputs {
                last.insert(inp.as_str(), k);
            }
        }
        let mut release_after = vec![Vec::new(); graph.nodes.len()];
        for (name, k) in last {
            if name != graph.loss {
                release_after[k].push(name.to_string());
            }
        }
        Ok(Model {
            vs,
            adapters: None,
            graph: graph.clone(),
            modules,
            release_after,
            device,
        })
    }

    /// Trainable parameters of the built model: unique tensors of the VarStore.
    pub fn built_parameters(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        let mut total = 0u64;
        for t in self.vs.trainable_variables() {
            if seen.insert(t.data_ptr() as usize) {
                total += t.numel() as u64;
            }
        }
        total
    }

    /// Seeded synthetic inputs for `batch`: float32 inputs standard normal, int64 inputs uniform
    /// in `[0, classes)`.
    pub fn inputs(&self, batch: u64) -> anyhow::Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for inp in &self.graph.inputs {
            let shape: Vec<i64> = inp.shape.at(batch).into_iter().map(i).collect();
            let t = match inp.dtype {
                DType::Float32 => Tensor::f_randn(&shape, (Kind::Float, self.device))?,
                DType::Int64 => {
                    let classes = inp.classes.ok_or_else(|| {
                        anyhow::anyhow!("input `{}`: int64 input without `classes`", inp.name)
                    })?;
                    Tensor::f_randint(i(classes), &shape, (Kind::Int64, self.device))?
                }
            };
            out.insert(inp.name.clone(), t);
        }
        Ok(out)
    }

    /// Runs the forward pass and returns the (scalar) loss. Panics raised by tch on a torch
    /// error are caught by the caller's phase guard.
    pub fn forward(&self, inputs: &HashMap<String, Tensor>, batch: u64) -> Tensor {
        let mut env: HashMap<String, Tensor> = inputs
            .iter()
            .map(|(k, v)| (k.clone(), v.shallow_clone()))
            .collect();
        for (k, n) in self.graph.nodes.iter().enumerate() {
            let args: Vec<&Tensor> = n
                .inputs
                .iter()
                .map(|name| {
                    env.get(name).unwrap_or_else(|| {
                        panic!("node `{}`: value `{name}` is not available", n.id)
                    })
                })
                .collect();
            let y = self.node(k, &n.op, &args, batch);
            for name in &self.release_after[k] {
                env.remove(name);
            }
            env.insert(n.id.clone(), y);
        }
        env.remove(&self.graph.loss)
            .unwrap_or_else(|| panic!("loss `{}` was not computed", self.graph.loss))
    }

    pub(crate) fn node(&self, k: usize, op: &Op, a: &[&Tensor], batch: u64) -> Tensor {
        let x = a[0];
        match (op, &self.modules[k]) {
            (Op::Linear { .. }, Module::Linear(l)) => l.fwd(x),
            (Op::Embedding { .. }, Module::Embedding(w)) => {
                Tensor::embedding(w, x, -1, false, false)
            }
            (
                Op::Conv1d(_)
                | Op::Conv2d(_)
                | Op::ConvTranspose2d(_)
                | Op::BatchNorm { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::GroupNorm { .. },
                m,
            ) => layer_forward(k, op, m, x),
            (Op::Activation(act), _) => match act {
                Activation::Relu => x.relu(),
                Activation::Gelu => x.gelu("none"),
                Activation::GeluTanh => x.gelu("tanh"),
                Activation::Silu => x.silu(),
                Activation::Tanh => x.tanh(),
            },
            (Op::Unary(f), _) => unary(x, *f),
            (Op::Dropout { p }, _) => x.dropout(*p, true),
            (Op::Add, _) => x + a[1],
            (Op::Mul, _) => x * a[1],
            (Op::Sub, _) => x - a[1],
            (Op::Div, _) => x / a[1],
            (Op::Concat { dim }, _) => Tensor::cat(a, *dim),
            (
                Op::Upsample { .. } | Op::MaxPool(_) | Op::AvgPool(_) | Op::AdaptiveAvgPool { .. },
                _,
            ) => pool_forward(op, x),
            (Op::Flatten { start_dim, end_dim }, _) => x.flatten(*start_dim, *end_dim),
            (Op::Reshape { shape }, _) => {
                let dims: Vec<i64> = shape
                    .iter()
                    .map(|d| match d {
                        ReshapeDim::Batch => i(batch),
                        ReshapeDim::Fixed(n) => i(*n),
                        ReshapeDim::Infer => -1,
                    })
                    .collect();
                x.reshape(&dims)
            }
            (Op::Permute { dims }, _) => x.permute(dims.as_slice()),
            (Op::SelectToken { index }, _) => x.select(1, *index),
            (Op::Softmax { dim }, _) => x.softmax(*dim, None::<Kind>),
            (Op::Mean { dim, keepdim }, _) => {
                x.mean_dim(Some([*dim].as_slice()), *keepdim, None::<Kind>)
            }
            (Op::CrossEntropy, _) => {
                let k = *x.size().last().expect("logits have a class axis");
                let logits = x.reshape([-1, k]);
                let labels = a[1].reshape([-1]);
                logits.cross_entropy_loss::<Tensor>(&labels, None, Reduction::Mean, -100, 0.0)
            }
            (Op::Mse, _) => x.mse_loss(a[1], Reduction::Mean),
            (Op::MultiheadAttention { .. }, m) => attention_forward(k, op, m, a),
            (Op::GqaAttention { .. }, m) => gqa_forward(k, op, m, x),
            (Op::MlaAttention { .. }, m) => mla_forward(k, op, m, x),
            (
                Op::Moe { .. },
                Module::Moe {
                    router,
                    grouped: Some((gate_up, down)),
                    top_k,
                    renormalize,
                    ..
                },
            ) => moe_grouped(x, router, [gate_up, down], *top_k, *renormalize),
            (
                Op::Moe { .. },
                Module::Moe {
                    router,
                    experts,
                    top_k,
                    ..
                },
            ) => moe(x, router, experts, *top_k),
            (Op::Lstm(_), Module::Lstm(m)) => nn::RNN::seq(m, x).0,
            (Op::Gru(_), Module::Gru(m)) => nn::RNN::seq(m, x).0,
            (Op::LearnedPosition { .. }, Module::LearnedPosition(w)) => {
                let t = x.size()[1];
                x + w.narrow(0, 0, t)
            }
            (Op::PrependToken { .. }, Module::PrependToken(tok)) => {
                let s = x.size();
                let cls = tok.expand([s[0], 1, s[2]], false).to_kind(x.kind());
                Tensor::cat(&[&cls, x], 1)
            }
            (Op::Parameter { .. }, Module::Parameter(w)) => {
                // latents.expand(B, ...): a stride-0 view of the parameter.
                let mut size = vec![x.size()[0]];
                size.extend(w.size());
                w.unsqueeze(0).expand(size, false)
            }
            (Op::Aten(g), Module::Aten(m)) => {
                crate::generic::forward(&self.graph.nodes[k].id, g, m, a, self.device, batch)
            }
            (Op::Matmul, _) => x.matmul(a[1]),
            (Op::Slice { dim, start, end }, _) => x.slice(*dim, i(*start), i(*end), 1),
            (
                Op::Sdpa {
                    causal, enable_gqa, ..
                },
                _,
            ) => Tensor::scaled_dot_product_attention::<&Tensor>(
                x,
                a[1],
                a[2],
                a.get(3).copied(),
                0.0,
                *causal,
                None,
                *enable_gqa,
            ),
            (Op::Constant { shape, dtype }, _) => {
                // Made from constants in every forward, outside autograd (rotary tables,
                // masks): float32 or bool, as transformers builds them (an all-true bool mask
                // hides nothing; its memory is a padding mask's).
                let kind = match dtype {
                    ConstantDType::Float32 => Kind::Float,
                    ConstantDType::Bool => Kind::Bool,
                };
                Tensor::ones(sizes(shape, batch).as_slice(), (kind, x.device()))
            }
            (Op::Expand { shape }, _) => x.expand(sizes(shape, batch).as_slice(), false),
            (op, _) => no_module(k, op),
        }
    }
}

/// A convolution's weight (Kaiming uniform) and bias.
fn conv_module(p: &nn::Path, op: &Op) -> Module {
    match op {
        Op::Conv1d(c) | Op::Conv2d(c) => {
            let mut dims = vec![
                i(c.out_channels),
                i(c.in_channels / c.groups),
                i(c.kernel_size),
            ];
            if matches!(op, Op::Conv2d(_)) {
                dims.push(i(c.kernel_size));
            }
            Module::Conv {
                w: p.var("weight", &dims, nn::init::DEFAULT_KAIMING_UNIFORM),
                b: c.bias
                    .then(|| p.var("bias", &[i(c.out_channels)], Init::Const(0.))),
                stride: i(c.stride),
                padding: i(c.padding),
                groups: i(c.groups),
            }
        }
        Op::ConvTranspose2d(c) => {
            let dims = [
                i(c.in_channels),
                i(c.out_channels),
                i(c.kernel_size),
                i(c.kernel_size),
            ];
            Module::ConvTranspose {
                w: p.var("weight", &dims, nn::init::DEFAULT_KAIMING_UNIFORM),
                b: c.bias
                    .then(|| p.var("bias", &[i(c.out_channels)], Init::Const(0.))),
                stride: i(c.stride),
                padding: i(c.padding),
                output_padding: i(c.output_padding),
            }
        }
        _ => unreachable!("conv_module: not a convolution"),
    }
}

/// A normalisation's weight (ones) and bias (zeros), and batch norm's running statistics.
fn norm_module(p: &nn::Path, op: &Op) -> Module {
    match op {
        Op::BatchNorm { num_features } => {
            let c = i(*num_features);
            Module::BatchNorm {
                w: p.var("weight", &[c], Init::Const(1.)),
                b: p.var("bias", &[c], Init::Const(0.)),
                mean: p.zeros_no_train("running_mean", &[c]),
                var: p.ones_no_train("running_var", &[c]),
            }
        }
        Op::LayerNorm {
            normalized_shape,
            bias,
        } => {
            let d = i(*normalized_shape);
            Module::LayerNorm {
                w: p.var("weight", &[d], Init::Const(1.)),
                b: bias.then(|| p.var("bias", &[d], Init::Const(0.))),
                d,
            }
        }
        Op::RmsNorm { dim } => Module::RmsNorm {
            w: p.var("weight", &[i(*dim)], Init::Const(1.)),
            d: i(*dim),
        },
        Op::GroupNorm {
            num_groups,
            num_channels,
        } => Module::GroupNorm {
            w: p.var("weight", &[i(*num_channels)], Init::Const(1.)),
            b: p.var("bias", &[i(*num_channels)], Init::Const(0.)),
            groups: i(*num_groups),
        },
        _ => unreachable!("norm_module: not a normalisation"),
    }
}

/// Multi-head attention's projections (torch.nn.MultiheadAttention's packed or separate ones,
/// or q, k, v and out projections with an optional relative position bias), and grouped-query
/// attention's.
fn attention_module(p: &nn::Path, op: &Op) -> Module {
    match op {
        Op::MultiheadAttention {
            embed_dim: d,
            num_heads,
            causal,
            bias,
            dropout,
            kdim,
            torch_impl: true,
            batch_first,
            ..
        } => {
            let (d, kd) = (i(*d), i(*kdim));
            let w = |name: &str, rows: i64, cols: i64| {
                p.var(name, &[rows, cols], nn::init::DEFAULT_KAIMING_UNIFORM)
            };
            Module::TorchMha {
                packed: (d == kd).then(|| w("in_proj_weight", 3 * d, d)),
                separate: (d != kd).then(|| {
                    (
                        w("q_proj_weight", d, d),
                        w("k_proj_weight", d, kd),
                        w("v_proj_weight", d, kd),
                    )
                }),
                in_bias: bias.then(|| p.var("in_proj_bias", &[3 * d], Init::Const(0.))),
                o: Lin::new(p, "out_proj", d as u64, d as u64, *bias),
                heads: i(*num_heads),
                causal: *causal,
                dropout: *dropout,
                batch_first: *batch_first,
            }
        }
        Op::MultiheadAttention {
            embed_dim: d,
            num_heads,
            causal,
            bias,
            relative_attention_buckets: nb,
            sdpa,
            dropout,
            kdim,
            ..
        } => Module::Mha {
            sdpa: *sdpa,
            dropout: *dropout,
            q: Lin::new(p, "q_proj", *d, *d, *bias),
            k: Lin::new(p, "k_proj", *kdim, *d, *bias),
            v: Lin::new(p, "v_proj", *kdim, *d, *bias),
            o: Lin::new(p, "out_proj", *d, *d, *bias),
            rel: (*nb > 0).then(|| {
                p.var(
                    "relative_attention_bias",
                    &[i(*nb), i(*num_heads)],
                    Init::Randn {
                        mean: 0.,
                        stdev: 0.02,
                    },
                )
            }),
            heads: i(*num_heads),
            causal: *causal,
        },
        Op::GqaAttention {
            embed_dim: d,
            num_heads,
            num_kv_heads,
            head_dim,
            causal,
            bias,
            out_bias,
            repeat_kv,
            qk_norm,
            ..
        } => Module::Gqa {
            repeat_kv: *repeat_kv,
            q: Lin::new(p, "q_proj", *d, num_heads * head_dim, *bias),
            k: Lin::new(p, "k_proj", *d, num_kv_heads * head_dim, *bias),
            v: Lin::new(p, "v_proj", *d, num_kv_heads * head_dim, *bias),
            o: Lin::new(p, "o_proj", num_heads * head_dim, *d, *out_bias),
            qk_norm: qk_norm.then(|| {
                (
                    p.var("q_norm", &[i(*head_dim)], Init::Const(1.)),
                    p.var("k_norm", &[i(*head_dim)], Init::Const(1.)),
                )
            }),
            heads: i(*num_heads),
            kv_heads: i(*num_kv_heads),
            head_dim: i(*head_dim),
            causal: *causal,
        },
        _ => unreachable!("attention_module: not a multi-head or grouped-query attention"),
    }
}

/// A `moe` op's parameters: the router, then per-expert w1, w3, w2 or the grouped layout's
/// 3-D `gate_up_proj` and `down_proj` (the order of `parameter_tensors()`).
fn moe_module(p: &nn::Path, op: &Op) -> Module {
    let Op::Moe {
        dim,
        hidden,
        num_experts,
        top_k,
        grouped,
        renormalize,
    } = op
    else {
        unreachable!("moe_module: not a moe op")
    };
    Module::Moe {
        router: Lin::new(p, "router", *dim, *num_experts, false),
        grouped: grouped.then(|| {
            let w = |name: &str, shape: [u64; 3]| {
                p.var(name, &shape.map(i), nn::init::DEFAULT_KAIMING_UNIFORM)
            };
            (
                w("gate_up_proj", [*num_experts, 2 * hidden, *dim]),
                w("down_proj", [*num_experts, *dim, *hidden]),
            )
        }),
        renormalize: *renormalize,
        experts: (0..if *grouped { 0 } else { *num_experts })
            .map(|e| {
                let q = p.sub(format!("expert{e}"));
                (
                    Lin::new(&q, "w1", *dim, *hidden, false),
                    Lin::new(&q, "w3", *dim, *hidden, false),
                    Lin::new(&q, "w2", *hidden, *dim, false),
                )
            })
            .collect(),
        top_k: i(*top_k),
    }
}

/// Multi-head latent attention's low-rank q and kv projections and their norms.
fn mla_module(p: &nn::Path, op: &Op) -> Module {
    match op {
        Op::MlaAttention {
            embed_dim: d,
            num_heads: h,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim: nope,
            qk_rope_head_dim: rope,
            v_head_dim,
            causal,
        } => {
            let qk = h * (nope + rope);
            let (q_a, q) = if *q_lora_rank > 0 {
                let a = Lin::new(p, "q_a_proj", *d, *q_lora_rank, false);
                let norm = p.var("q_a_norm", &[i(*q_lora_rank)], Init::Const(1.));
                (
                    Some((a, norm)),
                    Lin::new(p, "q_b_proj", *q_lora_rank, qk, false),
                )
            } else {
                (None, Lin::new(p, "q_proj", *d, qk, false))
            };
            Module::Mla {
                q_a,
                q,
                kv_a: Lin::new(p, "kv_a_proj", *d, kv_lora_rank + rope, false),
                kv_norm: p.var("kv_a_norm", &[i(*kv_lora_rank)], Init::Const(1.)),
                kv_b: Lin::new(
                    p,
                    "kv_b_proj",
                    *kv_lora_rank,
                    h * (nope + v_head_dim),
                    false,
                ),
                o: Lin::new(p, "o_proj", h * v_head_dim, *d, false),
                heads: i(*h),
                nope: i(*nope),
                rope: i(*rope),
                v_dim: i(*v_head_dim),
                kv_rank: i(*kv_lora_rank),
                causal: *causal,
            }
        }
        _ => unreachable!("mla_module: not a multi-head latent attention"),
    }
}

/// Convolutions and normalisations: their module's weights applied to `x`.
fn layer_forward(k: usize, op: &Op, m: &Module, x: &Tensor) -> Tensor {
    match (op, m) {
        (
            Op::Conv1d(_),
            Module::Conv {
                w,
                b,
                stride,
                padding,
                groups,
            },
        ) => x.conv1d(w, b.as_ref(), [*stride], [*padding], [1], *groups),
        (
            Op::Conv2d(_),
            Module::Conv {
                w,
                b,
                stride,
                padding,
                groups,
            },
        ) => x.conv2d(
            w,
            b.as_ref(),
            [*stride, *stride],
            [*padding, *padding],
            [1, 1],
            *groups,
        ),
        (
            Op::ConvTranspose2d(_),
            Module::ConvTranspose {
                w,
                b,
                stride,
                padding,
                output_padding,
            },
        ) => x.conv_transpose2d(
            w,
            b.as_ref(),
            [*stride, *stride],
            [*padding, *padding],
            [*output_padding, *output_padding],
            1,
            [1, 1],
        ),
        (Op::BatchNorm { .. }, Module::BatchNorm { w, b, mean, var }) => Tensor::batch_norm(
            x,
            Some(w),
            Some(b),
            Some(mean),
            Some(var),
            true,
            0.1,
            1e-5,
            true,
        ),
        (Op::LayerNorm { .. }, Module::LayerNorm { w, b, d }) => {
            x.layer_norm([*d], Some(w), b.as_ref(), 1e-5, true)
        }
        (Op::RmsNorm { .. }, Module::RmsNorm { w, d }) => x.rms_norm([*d], Some(w), None),
        (Op::GroupNorm { .. }, Module::GroupNorm { w, b, groups }) => {
            x.group_norm(*groups, Some(w), Some(b), 1e-5, true)
        }
        (op, _) => no_module(k, op),
    }
}

/// Upsampling and the pools (1-d on a rank-3 input, else 2-d).
fn pool_forward(op: &Op, x: &Tensor) -> Tensor {
    match op {
        Op::Upsample { scale_factor } => {
            let s = i(*scale_factor);
            let size = x.size();
            let (h, w) = (size[size.len() - 2], size[size.len() - 1]);
            x.upsample_nearest2d([h * s, w * s], Some(s as f64), Some(s as f64))
        }
        Op::MaxPool(p) => {
            let (kk, s, pd) = (i(p.kernel_size), i(p.stride), i(p.padding));
            if x.dim() == 3 {
                x.max_pool1d([kk], [s], [pd], [1], false)
            } else {
                x.max_pool2d([kk, kk], [s, s], [pd, pd], [1, 1], false)
            }
        }
        Op::AvgPool(p) => {
            let (kk, s, pd) = (i(p.kernel_size), i(p.stride), i(p.padding));
            if x.dim() == 3 {
                x.avg_pool1d([kk], [s], [pd], false, true)
            } else {
                x.avg_pool2d([kk, kk], [s, s], [pd, pd], false, true, None)
            }
        }
        Op::AdaptiveAvgPool { output_size } => {
            let o = i(*output_size);
            if x.dim() == 3 {
                x.adaptive_avg_pool1d([o])
            } else {
                x.adaptive_avg_pool2d([o, o])
            }
        }
        _ => unreachable!("pool_forward: not an upsample or a pool"),
    }
}

/// Multi-head attention: sdpa or eager on separate projections, or torch.nn.MultiheadAttention's
/// own forward; `a[1]`, where given, is the memory for cross-attention.
fn attention_forward(k: usize, op: &Op, m: &Module, a: &[&Tensor]) -> Tensor {
    let x = a[0];
    match (op, m) {
        (
            Op::MultiheadAttention { .. },
            Module::Mha {
                q,
                k,
                v,
                o,
                rel,
                heads,
                causal,
                sdpa,
                dropout,
            },
        ) => {
            if *sdpa {
                // What transformers' sdpa attention and torch.nn.MultiheadAttention with
                // need_weights=False run: projections, heads, one sdpa call.
                // Cross-attention: k and v project the memory (input 1).
                let (b, t, d) = (x.size()[0], x.size()[1], x.size()[2]);
                let m = if a.len() > 1 { a[1] } else { x };
                let hd = d / heads;
                let split = |l: &Lin, i: &Tensor| {
                    let ti = i.size()[1];
                    l.fwd(i).view([b, ti, *heads, hd]).transpose(1, 2)
                };
                let (qh, kh, vh) = (split(q, x), split(k, m), split(v, m));
                // dropout_p > 0 (training): on CPU torch runs sdpa's math path.
                let y = Tensor::scaled_dot_product_attention::<Tensor>(
                    &qh, &kh, &vh, None, *dropout, *causal, None, false,
                );
                o.fwd(&y.transpose(1, 2).reshape([b, t, d]))
            } else {
                let kv_in = if a.len() > 1 { a[1] } else { x };
                mha(
                    x,
                    kv_in,
                    q,
                    k,
                    v,
                    o,
                    rel.as_ref(),
                    *heads,
                    *causal,
                    *dropout,
                )
            }
        }
        (
            Op::MultiheadAttention { .. },
            Module::TorchMha {
                packed,
                separate,
                in_bias,
                o,
                heads,
                causal,
                dropout,
                batch_first,
            },
        ) => torch_mha(
            x,
            a.get(1).copied(),
            (packed.as_ref(), separate.as_ref(), in_bias.as_ref()),
            o,
            (*heads, *causal, *dropout, *batch_first),
        ),
        (op, _) => no_module(k, op),
    }
}

/// Grouped-query attention: k and v repeated to every head (or sdpa's `enable_gqa`), Qwen3's
/// optional q/k norms.
fn gqa_forward(k: usize, op: &Op, m: &Module, x: &Tensor) -> Tensor {
    match (op, m) {
        (
            Op::GqaAttention { .. },
            Module::Gqa {
                repeat_kv,
                q,
                k,
                v,
                o,
                qk_norm,
                heads,
                kv_heads,
                head_dim,
                causal,
            },
        ) => {
            let (b, t) = (x.size()[0], x.size()[1]);
            // Qwen3: q_norm(q_proj(x).view(b, t, h, hd)), then the transpose to heads.
            let norm = |y: Tensor, w: Option<&Tensor>| match w {
                Some(w) => y.rms_norm([*head_dim], Some(w), None),
                None => y,
            };
            let qn = qk_norm.as_ref().map(|(w, _)| w);
            let kn = qk_norm.as_ref().map(|(_, w)| w);
            let qh = norm(q.fwd(x).view([b, t, *heads, *head_dim]), qn).transpose(1, 2);
            let rep = heads / kv_heads;
            let kh = norm(k.fwd(x).view([b, t, *kv_heads, *head_dim]), kn).transpose(1, 2);
            let vh = v.fwd(x).view([b, t, *kv_heads, *head_dim]).transpose(1, 2);
            let (kh, vh) = if rep > 1 && *repeat_kv {
                (
                    kh.repeat_interleave_self_int(rep, Some(1), None),
                    vh.repeat_interleave_self_int(rep, Some(1), None),
                )
            } else {
                (kh, vh)
            };
            let y = Tensor::scaled_dot_product_attention::<Tensor>(
                &qh,
                &kh,
                &vh,
                None,
                0.0,
                *causal,
                None,
                rep > 1 && !*repeat_kv,
            );
            o.fwd(&y.transpose(1, 2).reshape([b, t, heads * head_dim]))
        }
        (op, _) => no_module(k, op),
    }
}

/// Multi-head latent attention: low-rank q and kv projections with rms norms, a shared rotary
/// key part.
fn mla_forward(k: usize, op: &Op, m: &Module, x: &Tensor) -> Tensor {
    match (op, m) {
        (
            Op::MlaAttention { .. },
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
                causal,
            },
        ) => {
            let (b, t) = (x.size()[0], x.size()[1]);
            let h = *heads;
            let qp = match q_a {
                Some((qa, norm)) => {
                    let r = norm.size()[0];
                    q.fwd(&qa.fwd(x).rms_norm([r], Some(norm), None))
                }
                None => q.fwd(x),
            };
            let qh = qp.view([b, t, h, nope + rope]).transpose(1, 2);
            let kva = kv_a.fwd(x);
            let parts = kva.split_with_sizes([*kv_rank, *rope], -1);
            let c = parts[0].rms_norm([*kv_rank], Some(kv_norm), None);
            let k_rope = parts[1]
                .view([b, t, 1, *rope])
                .expand([b, t, h, *rope], false);
            let kvb = kv_b.fwd(&c).view([b, t, h, nope + v_dim]);
            let kv_parts = kvb.split_with_sizes([*nope, *v_dim], -1);
            let kh = Tensor::cat(&[&kv_parts[0], &k_rope], -1).transpose(1, 2);
            let vh = kv_parts[1].transpose(1, 2);
            let y = Tensor::scaled_dot_product_attention::<Tensor>(
                &qh, &kh, &vh, None, 0.0, *causal, None, false,
            );
            o.fwd(&y.transpose(1, 2).reshape([b, t, h * v_dim]))
        }
        (op, _) => no_module(k, op),
    }
}

/// The panic for an op whose module was not built (a harness bug).
fn no_module(k: usize, op: &Op) -> ! {
    panic!(
        "node {k}: op `{}` has no module built for it (harness bug)",
        op.name()
    )
}

/// Eager multi-head attention (torch.nn.MultiheadAttention with need_weights=True,
/// average_attn_weights=False): materialises softmax(QKᵀ/√hd) `[B,h,Tq,Tk]`.
#[allow(clippy::too_many_arguments)]
fn mha(
    x: &Tensor,
    kv: &Tensor,
    q: &Lin,
    k: &Lin,
    v: &Lin,
    o: &Lin,
    rel: Option<&Tensor>,
    heads: i64,
    causal: bool,
    dropout: f64,
) -> Tensor {
    let (b, tq, d) = (x.size()[0], x.size()[1], x.size()[2]);
    let tk = kv.size()[1];
    let hd = d / heads;
    let qh = q.fwd(x).view([b, tq, heads, hd]).transpose(1, 2);
    let kh = k.fwd(kv).view([b, tk, heads, hd]).transpose(1, 2);
    let vh = v.fwd(kv).view([b, tk, heads, hd]).transpose(1, 2);
    let q_scaled = qh * (1.0 / (hd as f64).sqrt());
    let mut scores = q_scaled.matmul(&kh.transpose(-2, -1));
    let dev = x.device();
    if let Some(table) = rel {
        let nb = table.size()[0];
        let lo = -(nb / 2);
        let hi = nb - 1 - nb / 2;
        let qi = Tensor::arange(tq, (Kind::Int64, dev)).view([tq, 1]);
        let kj = Tensor::arange(tk, (Kind::Int64, dev)).view([1, tk]);
        let bucket = (kj - qi).clamp(lo, hi) + (nb / 2);
        let bias = table
            .index_select(0, &bucket.view([-1]))
            .view([tq, tk, heads])
            .permute([2, 0, 1])
            .unsqueeze(0);
        scores += bias;
    }
    if causal {
        let mask = Tensor::ones([tq, tk], (Kind::Bool, dev)).triu(1 + tk - tq);
        scores = scores.masked_fill(&mask, f64::NEG_INFINITY);
    }
    let mut weights = scores.softmax(-1, None::<Kind>);
    if dropout > 0.0 {
        // Dropout on the probabilities (training), as transformers' eager attention does.
        weights = weights.dropout(dropout, true);
    }
    let y = weights.matmul(&vh);
    o.fwd(&y.transpose(1, 2).reshape([b, tq, d]))
}

/// torch.nn.MultiheadAttention's forward, batch_first, need_weights=False, no masks, read off
/// `F.multi_head_attention_forward` (torch 2.11, `torch/nn/functional.py`): the inputs are
/// transposed to `[T, B, E]` views and projected (`_in_projection_packed`: self-attention one
/// packed linear whose `[3, T, B, E]` contiguous copy q, k and v view; a memory that is key and
/// value one linear for q and one packed for k and v; `_in_projection` with a kdim of its own:
/// three), heads as `[B * h, T, hd]` views, sdpa, the context permuted to `[T, B, E]` and made
/// contiguous for out_proj, returned transposed to `[B, T, E]`.
#[allow(clippy::type_complexity)]
fn torch_mha(
    x: &Tensor,
    memory: Option<&Tensor>,
    (packed, separate, in_bias): (
        Option<&Tensor>,
        Option<&(Tensor, Tensor, Tensor)>,
        Option<&Tensor>,
    ),
    o: &Lin,
    (heads, causal, dropout, batch_first): (i64, bool, f64, bool),
) -> Tensor {
    // `[T, B, E]` views of batch-first inputs; torch's default layout is read as it is.
    let seq_first = |t: &Tensor| {
        if batch_first {
            t.transpose(0, 1)
        } else {
            t.shallow_clone()
        }
    };
    let q_in = seq_first(x);
    let (tq, b, e) = (q_in.size()[0], q_in.size()[1], q_in.size()[2]);
    let hd = e / heads;
    let split_bias = |sizes: &[i64]| -> Vec<Option<Tensor>> {
        match in_bias {
            Some(bias) => bias
                .split_with_sizes(sizes, 0)
                .into_iter()
                .map(Some)
                .collect(),
            None => sizes.iter().map(|_| None).collect(),
        }
    };
    // `proj.unflatten(-1, (n, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()`.
    let unpack = |proj: Tensor, n: i64| {
        proj.unflatten(-1, [n, e])
            .unsqueeze(0)
            .transpose(0, -2)
            .squeeze_dim(-2)
            .contiguous()
    };
    let (q, k, v, s) = match (memory, packed, separate) {
        (None, Some(w), _) => {
            let proj = unpack(q_in.linear(w, in_bias), 3);
            (proj.get(0), proj.get(1), proj.get(2), tq)
        }
        (Some(m), Some(w), _) => {
            let m_in = seq_first(m);
            let ws = w.split_with_sizes([e, 2 * e], 0);
            let bs = split_bias(&[e, 2 * e]);
            let q = q_in.linear(&ws[0], bs[0].as_ref());
            let kv = unpack(m_in.linear(&ws[1], bs[1].as_ref()), 2);
            (q, kv.get(0), kv.get(1), m_in.size()[0])
        }
        (Some(m), None, Some((wq, wk, wv))) => {
            let m_in = seq_first(m);
            let bs = split_bias(&[e, e, e]);
            let q = q_in.linear(wq, bs[0].as_ref());
            let k = m_in.linear(wk, bs[1].as_ref());
            let v = m_in.linear(wv, bs[2].as_ref());
            (q, k, v, m_in.size()[0])
        }
        _ => panic!(
            "multihead_attention impl torch: a kdim of its own needs the memory (harness bug)"
        ),
    };
    let heads_of = |t: Tensor, len: i64| {
        t.view([len, b * heads, hd])
            .transpose(0, 1)
            .view([b, heads, len, hd])
    };
    let (q, k, v) = (heads_of(q, tq), heads_of(k, s), heads_of(v, s));
    let y = Tensor::scaled_dot_product_attention::<Tensor>(
        &q, &k, &v, None, dropout, causal, None, false,
    );
    let y = y.permute([2, 0, 1, 3]).contiguous().view([b * tq, e]);
    let y = o.fwd(&y).view([tq, b, e]);
    if batch_first {
        y.transpose(0, 1)
    } else {
        y
    }
}

/// Mixture of experts: softmax router, top-k (renormalised), SwiGLU experts on routed tokens.
fn moe(x: &Tensor, router: &Lin, experts: &[(Lin, Lin, Lin)], top_k: i64) -> Tensor {
    let size = x.size();
    let d = *size.last().expect("moe input has a feature axis");
    let flat = x.reshape([-1, d]);
    let probs = router.fwd(&flat).softmax(-1, Kind::Float);
    let (vals, idx) = probs.topk(top_k, -1, true, true);
    let vals = &vals / vals.sum_dim_intlist(-1, true, None::<Kind>);
    let mut out = Tensor::zeros(flat.size(), (flat.kind(), flat.device()));
    for (e, (w1, w3, w2)) in experts.iter().enumerate() {
        let pos = idx.eq(e as i64).nonzero();
        if pos.size()[0] == 0 {
            continue;
        }
        let rows = pos.select(1, 0);
        let slots = pos.select(1, 1);
        let xs = flat.index_select(0, &rows);
        let h = w1.fwd(&xs).silu() * w3.fwd(&xs);
        let weight = vals.index(&[Some(&rows), Some(&slots)]).unsqueeze(-1);
        let y = (w2.fwd(&h) * weight).to_kind(out.kind());
        let _ = out.index_add_(0, &rows, &y);
    }
    out.view(size.as_slice())
}

/// Mixture of experts as transformers 5 runs it by default (`MixtralTopKRouter` and
/// `grouped_mm_experts_forward` in integrations/moe.py): softmax router, top-k (renormalised
/// in place when `renormalize`), the routed rows sorted by expert and gathered, one
/// `grouped_mm` with `gate_up_proj`, `silu(gate) * up`, one with `down_proj`, times the
/// sorted weights, un-sorted and summed over k.
fn moe_grouped(
    x: &Tensor,
    router: &Lin,
    [gate_up, down]: [&Tensor; 2],
    top_k: i64,
    renormalize: bool,
) -> Tensor {
    let size = x.size();
    let d = *size.last().expect("moe input has a feature axis");
    let flat = x.reshape([-1, d]);
    let (mut vals, idx) = router
        .fwd(&flat)
        .softmax(-1, Kind::Float)
        .topk(top_k, -1, true, true);
    if renormalize {
        let sum = vals.sum_dim_intlist(-1, true, None::<Kind>);
        let _ = vals.g_div_(&sum);
    }
    let experts = gate_up.size()[0];
    let (ids, perm) = idx.reshape([-1]).sort(0, false);
    let rows = flat.index(&[Some(perm.floor_divide_scalar(top_k))]);
    let weights = vals.reshape([-1]).index(&[Some(&perm)]);
    // transformers counts the rows per expert with histc on a float copy; a bincount is the
    // same [E] counts.
    let offs = ids.bincount(None::<Tensor>, experts).cumsum(0, Kind::Int);
    let h = rows.internal_grouped_mm(&gate_up.transpose(-2, -1), Some(&offs), None, None);
    let halves = h.chunk(2, -1);
    let h = halves[0].silu() * &halves[1];
    let y = h.internal_grouped_mm(&down.transpose(-2, -1), Some(&offs), None, None);
    let y = y * weights.unsqueeze(-1);
    let mut inv = perm.empty_like();
    let n = perm.size()[0];
    let _ = inv.index_put_(
        &[Some(&perm)],
        &Tensor::arange(n, (Kind::Int64, perm.device())),
        false,
    );
    let y = y.index(&[Some(&inv)]);
    y.view([-1, top_k, d])
        .sum_dim_intlist(1, false, None::<Kind>)
        .view(size.as_slice())
}

/// A generic elementwise function, one ATen op each (`x * c` and `x + c` with a number are
/// `mul.Scalar` and `add.Scalar`).
fn unary(x: &Tensor, f: UnaryFn) -> Tensor {
    match f {
        UnaryFn::Exp => x.exp(),
        UnaryFn::Log => x.log(),
        UnaryFn::Sqrt => x.sqrt(),
        UnaryFn::Rsqrt => x.rsqrt(),
        UnaryFn::Sigmoid => x.sigmoid(),
        UnaryFn::Tanh => x.tanh(),
        UnaryFn::Neg => x.neg(),
        UnaryFn::Abs => x.abs(),
        UnaryFn::Sin => x.sin(),
        UnaryFn::Cos => x.cos(),
        UnaryFn::Erf => x.erf(),
        UnaryFn::Reciprocal => x.reciprocal(),
        UnaryFn::Pow(e) => x.pow_tensor_scalar(e),
        UnaryFn::MulScalar(c) => x * c,
        UnaryFn::AddScalar(c) => x + c,
    }
}
