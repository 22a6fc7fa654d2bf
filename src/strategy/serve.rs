//! Serving engines' KV-cache budgets, by each engine's documented arithmetic (`plan --inference
//! --serve ENGINE`). memcal computes the weights and the cache's bytes a token from the graph
//! and the prefill's activation peak by its inference formula; what it does not measure (the
//! memory outside torch's allocator, CUDA graphs) is a named estimate with its source, never
//! folded into another term.
//!
//! - **vLLM** (`gpu_memory_utilization`, default 0.9; its start-up log "the current vLLM
//!   instance can use total_gpu_memory x gpu_memory_utilization ... model weights take ...;
//!   non_torch_memory takes ...; PyTorch activation peak memory takes ...; the rest of the
//!   memory reserved for KV Cache is ..."): KV = total x utilization - weights - activation
//!   peak - non-torch memory; tokens in blocks of 16 (`--block-size`, CUDA's default).
//! - **SGLang** (`--mem-fraction-static`, chosen by the GPU's size when not given): the static
//!   pool (weights and KV cache) is total x fraction, so KV = total x fraction - weights
//!   (`rest_memory = available - total x (1 - fraction)`, available measured after the weights
//!   load); `max_total_num_tokens = KV / cell_size`, cell = layers x kv heads x head dim x 2 x
//!   dtype bytes.
//! - **TensorRT-LLM** (`KvCacheConfig.free_gpu_memory_fraction`, default 0.9): KV = fraction x
//!   the memory free once the engine (weights, activation buffers) is loaded; tokens in blocks
//!   of 32 (`tokens_per_block`).

use serde::Serialize;

/// A serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
    Trtllm,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::Trtllm => "TensorRT-LLM",
        }
    }

    /// The engine's fraction flag.
    pub fn flag(self) -> &'static str {
        match self {
            Engine::Vllm => "--gpu-memory-utilization",
            Engine::Sglang => "--mem-fraction-static",
            Engine::Trtllm => "free_gpu_memory_fraction",
        }
    }

    /// The documented default fraction (None: SGLang picks one by the GPU's memory).
    pub fn default_fraction(self) -> Option<f64> {
        match self {
            Engine::Vllm | Engine::Trtllm => Some(0.9),
            Engine::Sglang => None,
        }
    }

    /// Tokens a cache block holds.
    pub fn block(self) -> u64 {
        match self {
            Engine::Vllm => 16,
            Engine::Sglang => 1,
            Engine::Trtllm => 32,
        }
    }
}

/// What the engine's memory outside torch's allocator (CUDA context, NCCL, cuBLAS workspaces)
/// is taken to be: vLLM measures it at start-up; memcal does not. The estimate is vLLM's own
/// start-up log for Meta-Llama-3-8B on one H100 (vLLM pull request 10511: 1.79 GiB).
pub const NON_TORCH_ESTIMATE: u64 = 1_921_997_865; // 1.79 GiB
pub const NON_TORCH_SOURCE: &str =
    "estimate: vLLM's start-up log for Meta-Llama-3-8B on one H100 (vLLM PR 10511), not measured here";

/// The inputs of one card's budget.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub card_bytes: u64,
    pub fraction: f64,
    pub weights: u64,
    /// The prefill's activation peak (vLLM profiles it; TensorRT-LLM's buffers).
    pub activation: u64,
    /// Memory outside torch's allocator (vLLM only).
    pub non_torch: u64,
    /// KV bytes a token, every layer.
    pub bytes_per_token: u64,
}

/// One card's budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budget {
    pub engine: Engine,
    pub fraction: f64,
    /// What the engine may use (vLLM: total x utilization; SGLang: the static pool;
    /// TensorRT-LLM: the free memory after the engine loads).
    pub usable_bytes: u64,
    pub weights_bytes: u64,
    pub activation_bytes: u64,
    pub non_torch_bytes: u64,
    /// The KV cache's bytes; 0 where nothing is left.
    pub kv_bytes: u64,
    /// Tokens the cache holds, rounded down to whole blocks.
    pub kv_tokens: u64,
    pub block_tokens: u64,
}

/// The engine's arithmetic on one card.
pub fn budget(engine: Engine, i: Inputs) -> Budget {
    let total = i.card_bytes as f64;
    let (usable, kv) = match engine {
        Engine::Vllm => {
            let usable = total * i.fraction;
            (
                usable,
                usable - i.weights as f64 - i.activation as f64 - i.non_torch as f64,
            )
        }
        Engine::Sglang => {
            let usable = total * i.fraction;
            (usable, usable - i.weights as f64)
        }
        Engine::Trtllm => {
            let free = total - i.weights as f64 - i.activation as f64;
            (free, free * i.fraction)
        }
    };
    let kv_bytes = kv.max(0.0).floor() as u64;
    let block = engine.block();
    let kv_tokens = if i.bytes_per_token == 0 {
        0
    } else {
        kv_bytes / (i.bytes_per_token * block) * block
    };
    Budget {
        engine,
        fraction: i.fraction,
        usable_bytes: usable.max(0.0).floor() as u64,
        weights_bytes: i.weights,
        activation_bytes: match engine {
            Engine::Sglang => 0,
            _ => i.activation,
        },
        non_torch_bytes: match engine {
            Engine::Vllm => i.non_torch,
            _ => 0,
        },
        kv_bytes,
        kv_tokens,
        block_tokens: block,
    }
}

impl Budget {
    /// Sequences of `context` tokens the cache holds at once (vLLM's "maximum concurrency").
    pub fn concurrency(&self, context: u64) -> u64 {
        self.kv_tokens.checked_div(context).unwrap_or(0)
    }

    /// The longest context one sequence may have: the cache's tokens, capped by the model's
    /// learned positions where it has them.
    pub fn longest_context(&self, position_limit: Option<u64>) -> u64 {
        position_limit.map_or(self.kv_tokens, |m| self.kv_tokens.min(m))
    }
}
