//! The strategy protocols: the staged (checkpointed) backward gives the plain backward's
//! gradients; LoRA trains the adapters alone; NF4 packing round-trips within its code book's
//! spacing and stores half a byte a weight plus a scale a block.

use memcal::graph::Graph;
use memcal::strategy::parse_row_spec;
use memcal_measure::builder::Model;
use memcal_measure::strategies::{self, Packed, Tape};
use std::collections::HashMap;
use std::path::Path;
use tch::{Device, Kind, Tensor};

fn graph(name: &str) -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Graph::load(&root.join(format!("data/graphs/{name}.json"))).expect("graph loads")
}

fn protocol(spec: &str) -> strategies::Protocol {
    strategies::protocol(&parse_row_spec(spec).unwrap()).unwrap()
}

/// Every variable's gradient after one backward of `model` (plain or staged), copied, with the
/// gradients zeroed after.
fn grads(
    model: &Model,
    g: &Graph,
    inputs: &HashMap<String, Tensor>,
    spec: Option<&str>,
) -> Vec<Tensor> {
    match spec {
        None => model.forward(inputs, 2).backward(),
        Some(s) => {
            let st = strategies::stages(g, &protocol(s)).expect("staged");
            let (loss, tape) = Tape::forward(model, inputs, 2, &st);
            tape.backward(model, loss, 2).unwrap();
        }
    }
    let mut vars: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars.into_iter()
        .map(|(_, t)| {
            let g = t.grad().copy();
            let _ = t.grad().zero_();
            g
        })
        .collect()
}

#[test]
fn the_checkpointed_backward_gives_the_plain_gradients() {
    for name in ["llama-r1", "gpt-r1", "t5-r1"] {
        let g = graph(name);
        // One model and one batch for both (other tests seed the global generator too).
        let model = Model::build(&g, Device::Cpu).unwrap();
        let inputs = model.inputs(2).unwrap();
        let plain = grads(&model, &g, &inputs, None);
        for spec in ["checkpoint:every=1", "checkpoint:every=2"] {
            let staged = grads(&model, &g, &inputs, Some(spec));
            assert_eq!(plain.len(), staged.len());
            for (a, b) in plain.iter().zip(&staged) {
                let diff = (a - b).abs().max().double_value(&[]);
                let scale = a.abs().max().double_value(&[]).max(1e-6);
                assert!(
                    diff <= 1e-4 * scale,
                    "{name} {spec}: gradients differ by {diff}"
                );
            }
        }
    }
}

#[test]
fn lora_trains_the_adapters_alone() {
    let g = graph("llama-r1");
    let mut model = Model::build(&g, Device::Cpu).unwrap();
    let targets = strategies::apply_low_rank(&mut model, 4, false).unwrap();
    assert_eq!(
        targets,
        4 * 7,
        "q, k, v, o, gate, up, down in each of 4 blocks"
    );
    let inputs = model.inputs(1).unwrap();
    model.forward(&inputs, 1).backward();
    for (name, t) in model.vs.variables() {
        assert!(!t.grad().defined(), "base `{name}` got a gradient");
    }
    let adapters = model.adapters.as_ref().unwrap().trainable_variables();
    assert_eq!(adapters.len(), 2 * targets);
    let adapter_params: i64 = adapters.iter().map(|t| t.numel() as i64).sum();
    let g_terms = memcal::strategy::memory::graph_terms(&g, 1);
    assert_eq!(
        adapter_params as u64,
        memcal::strategy::memory::adapter_parameters(&g_terms, 4),
        "the harness's adapters are the plan's"
    );
    assert!(adapters.iter().all(|t| t.grad().defined()));
    let resnet = graph("resnet-r1");
    let mut m = Model::build(&resnet, Device::Cpu).unwrap();
    assert!(strategies::apply_low_rank(&mut m, 4, false).is_err());
}

#[test]
fn nf4_packing_round_trips_within_the_code_book() {
    tch::manual_seed(3);
    let w = Tensor::randn([96, 70], (Kind::Float, Device::Cpu));
    let p = Packed::quantize(&w);
    let blocks = (96 * 70 + 63) / 64;
    assert_eq!(p.bytes(), (blocks * 32 + blocks * 4) as u64);
    let d = p.dequantize();
    assert_eq!(d.size(), vec![96, 70]);
    // The widest gap of the NF4 code book is 0.304 (between -1 and -0.696): half of it times
    // the block's absmax bounds the error.
    let err = (&d - &w).abs().max().double_value(&[]);
    let absmax = w.abs().max().double_value(&[]);
    assert!(err <= 0.153 * absmax, "error {err} vs absmax {absmax}");
    assert!(err > 0.0, "4-bit codes are not exact");
}

#[test]
fn the_sharded_adamw_of_one_rank_is_torchs_adamw_on_its_shard() {
    use tch::nn::OptimizerConfig;
    let make = || {
        let vs = tch::nn::VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[10, 7], tch::nn::Init::Const(0.5));
        (vs, w)
    };
    let (vs_a, wa) = make();
    let (_vs_b, wb) = make();
    let mut opt = tch::nn::AdamW::default().build(&vs_a, 1e-2).unwrap();
    let mut sharded = strategies::ShardedAdamW::new(1);
    let mut quarter = strategies::ShardedAdamW::new(4);
    let (_vs_c, wc) = make();
    for step in 0..3 {
        let x =
            Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0, 1.5, -1.0, 2.0]).view([7, 1]) * (step + 1);
        for w in [&wa, &wb, &wc] {
            w.matmul(&x)
                .pow_tensor_scalar(2)
                .sum(Kind::Float)
                .backward();
        }
        opt.step();
        sharded.step(&[wb.shallow_clone()], 1e-2);
        // World 4 for one step only: afterwards its elements that rank 0 does not update
        // change the gradients.
        if step == 0 {
            quarter.step(&[wc.shallow_clone()], 1e-2);
            let flat_c = wc.view([-1]);
            let first = wa.view([-1]).narrow(0, 0, 18);
            let shard = (first - flat_c.narrow(0, 0, 18))
                .abs()
                .max()
                .double_value(&[]);
            assert!(shard < 1e-6, "rank 0's shard differs by {shard}");
            let rest = (flat_c.narrow(0, 18, 52) - 0.5)
                .abs()
                .max()
                .double_value(&[]);
            assert_eq!(rest, 0.0, "the other ranks' elements are not updated here");
        }
        for w in [&wa, &wb, &wc] {
            let mut g = w.grad();
            let _ = g.zero_();
        }
    }
    let diff = (&wa - &wb).abs().max().double_value(&[]);
    assert!(diff < 1e-6, "world 1 differs from torch's AdamW by {diff}");
}
