//! The serving engines' KV budgets (`plan --inference --serve`) on worked examples from the
//! engines' own logs.

use memcal::strategy::serve::{budget, Engine, Inputs};
use std::process::Command;

const GIB: f64 = 1073741824.0;

fn gib(x: f64) -> u64 {
    (x * GIB).round() as u64
}

#[test]
fn vllm_reproduces_its_start_up_log_for_llama_3_8b_on_an_h100() {
    // vLLM pull request 10511, `vllm serve meta-llama/Meta-Llama-3-8B`: total_gpu_memory
    // 79.22GiB, gpu_memory_utilization 0.90 -> 71.29GiB; model weights take 14.96GiB;
    // non_torch_memory 1.79GiB; PyTorch activation peak memory 1.26GiB;
    // available_kv_cache_memory 53.29GiB.
    let b = budget(
        Engine::Vllm,
        Inputs {
            card_bytes: gib(79.22),
            fraction: 0.90,
            weights: gib(14.96),
            activation: gib(1.26),
            non_torch: gib(1.79),
            // 32 layers x K and V x 8 kv heads x 128 x 2 bytes (bf16).
            bytes_per_token: 32 * 2 * 8 * 128 * 2,
        },
    );
    assert!((b.usable_bytes as f64 / GIB - 71.29).abs() < 0.01, "{b:?}");
    assert!((b.kv_bytes as f64 / GIB - 53.29).abs() < 0.01, "{b:?}");
    // Blocks of 16 tokens of 128 KiB each.
    assert_eq!(b.block_tokens, 16);
    assert_eq!(b.kv_tokens % 16, 0);
    assert_eq!(b.kv_tokens, b.kv_bytes / (131_072 * 16) * 16);
    assert_eq!(b.concurrency(8192), b.kv_tokens / 8192);
}

#[test]
fn vllm_reproduces_the_block_count_of_its_log_for_llama_3_2_11b_vision() {
    // vLLM pull request 12126: 71.29GiB usable; weights 19.86GiB; non_torch 0.16GiB; activation
    // peak 36.63GiB; "the rest of the memory reserved for KV Cache is 14.65GiB"; "# CUDA blocks:
    // 6001" (40 layers x K and V x 8 kv heads x 128 x 2 bytes a token, 16 tokens a block).
    let b = budget(
        Engine::Vllm,
        Inputs {
            card_bytes: gib(79.22),
            fraction: 0.90,
            weights: gib(19.86),
            activation: gib(36.63),
            non_torch: gib(0.16),
            bytes_per_token: 40 * 2 * 8 * 128 * 2,
        },
    );
    // The log's figures are rounded to 0.01 GiB: the block count to within 3 blocks.
    let blocks = b.kv_tokens / 16;
    assert!(blocks.abs_diff(6001) <= 3, "{blocks} blocks ({b:?})");
    assert!((b.kv_bytes as f64 / GIB - 14.65).abs() < 0.02, "{b:?}");
}

#[test]
fn sglang_counts_tokens_by_its_cell_size() {
    // vLLM issue 21348 quotes SGLang for Qwen3-235B-A22B-FP8 on 4 H100s (TP 4):
    // "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB" (GB = GiB):
    // a cell of 94 layers x 1 kv head a GPU x 128 x 2 bytes, K and V. Its pool of K and V is
    // static memory less the weights; given the pool, the tokens are pool / cell.
    let cell = 94 * 128 * 2 * 2;
    let pool = 367_404 * cell;
    assert!((pool as f64 / 2.0 / GIB - 8.23).abs() < 0.01);
    let weights = gib(20.0);
    let b = budget(
        Engine::Sglang,
        Inputs {
            card_bytes: ((pool + weights) as f64 / 0.93).ceil() as u64,
            fraction: 0.93,
            weights,
            activation: gib(3.0),
            non_torch: gib(1.0),
            bytes_per_token: cell,
        },
    );
    // Activations and non-torch memory live in the (1 - fraction) SGLang leaves outside.
    assert_eq!((b.activation_bytes, b.non_torch_bytes), (0, 0));
    assert!(b.kv_tokens.abs_diff(367_404) <= 1, "{b:?}");
}

#[test]
fn tensorrt_llm_takes_its_fraction_of_the_memory_free_after_the_engine() {
    // KvCacheConfig(free_gpu_memory_fraction=0.9): 0.9 x (card - weights - activation buffers),
    // in blocks of 32 tokens.
    let b = budget(
        Engine::Trtllm,
        Inputs {
            card_bytes: gib(80.0),
            fraction: 0.9,
            weights: gib(16.0),
            activation: gib(4.0),
            non_torch: gib(1.79),
            bytes_per_token: 131_072,
        },
    );
    assert_eq!(b.kv_bytes, (0.9 * gib(60.0) as f64).floor() as u64);
    assert_eq!(b.kv_tokens % 32, 0);
    assert_eq!(b.non_torch_bytes, 0);
    // Nothing left: no tokens, never a negative budget.
    let none = budget(
        Engine::Vllm,
        Inputs {
            card_bytes: gib(16.0),
            fraction: 0.9,
            weights: gib(16.0),
            activation: 0,
            non_torch: 0,
            bytes_per_token: 131_072,
        },
    );
    assert_eq!(
        (none.kv_bytes, none.kv_tokens, none.concurrency(100)),
        (0, 0, 0)
    );
}

fn memcal(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_serve_prints_the_longest_context_per_card_and_refuses_bad_fractions() {
    let base = [
        "plan",
        "data/graphs/gen-llama-r1.json",
        "--batch",
        "1",
        "--precision",
        "fp32",
        "--inference",
        "--context",
        "512",
    ];
    let out = memcal(&[&base[..], &["--serve", "vllm"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vLLM (--gpu-memory-utilization 0.9)"),
        "{text}"
    );
    assert!(
        text.contains("longest") && text.contains("H100 80 GB"),
        "{text}"
    );
    for (flags, needle) in [
        (vec!["--serve", "vllm", "--fraction", "0"], "--fraction 0"),
        (vec!["--serve", "trtllm", "--fraction", "1.5"], "(0, 1]"),
        (vec!["--serve", "sglang"], "give --fraction"),
    ] {
        let out = memcal(&[&base[..], &flags[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
    let out = memcal(&[&base[..], &["--prompt", "600"]].concat());
    assert_eq!(out.status.code(), Some(2));
    let out = memcal(&[&base[..], &["--seq", "64"]].concat());
    assert_eq!(out.status.code(), Some(2));
    let json = memcal(&[&base[..], &["--serve", "vllm", "--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["mode"], "inference");
    assert_eq!(v["decided_by"], "simulated (generate rule set)");
    assert!(v["serve"]["cards"].as_array().unwrap().len() >= 4);
}
