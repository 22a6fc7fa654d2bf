//! The simulator on small graphs, against expectations computed by hand (cpu-fp32: 4 bytes per
//! float, 8 per int64). Each test says how its numbers are made.

use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::simulate::{render_timeline, simulate, Simulation};
use std::path::Path;

fn graph(json: &str) -> Graph {
    Graph::from_bytes(json.as_bytes(), Path::new("test.json")).expect("valid graph")
}

fn sim(g: &Graph, batch: u64) -> Simulation {
    simulate(g, batch, Precision::Fp32).expect("fp32 has a rule table")
}

/// The event of `node` in `phase`.
fn event<'a>(s: &'a Simulation, phase: &str, node: &str) -> &'a memcal::simulate::Event {
    s.timeline
        .iter()
        .find(|e| e.phase == phase && e.node == node)
        .unwrap_or_else(|| panic!("no event {phase}/{node}"))
}

const WIDE_MLP: &str = r#"{"format":"memcal-graph/1","name":"mlp","family":"mlp","variant":"t","inputs":[
    {"name":"x","shape":["B",256],"dtype":"float32"},
    {"name":"y","shape":["B"],"dtype":"int64","classes":10}],
    "nodes":[
    {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":256,"out_features":1024}},
    {"id":"act","op":"relu","inputs":["fc1"]},
    {"id":"fc2","op":"linear","inputs":["act"],"attributes":{"in_features":1024,"out_features":10}},
    {"id":"loss","op":"cross_entropy","inputs":["fc2","y"]}],"loss":"loss"}"#;

#[test]
fn wide_mlp_peaks_in_the_optimizer_step_exactly() {
    let g = graph(WIDE_MLP);
    let p = 256 * 1024 + 1024 + 1024 * 10 + 10;
    let b = 4;
    let s = sim(&g, b);
    assert_eq!(s.parameters, p);
    // Inputs: x 4 x 256 float32, y 4 int64.
    let inputs = b * 256 * 4 + b * 8;
    // Step 2's AdamW update of fc1's weight (the largest tensor, 256 x 1024): weights, grads
    // and both Adam states (16 bytes a parameter), the inputs, and the update's two
    // temporaries of that tensor's size plus three float32 scalars.
    let largest = 256 * 1024 * 4;
    assert_eq!(s.peak_bytes, 16 * p + inputs + 2 * largest + 12);
    assert_eq!(s.peak_phase, "step2.optimizer");
    assert_eq!(s.peak_step, 2);
    assert_eq!(s.peak_node, "fc1#0");
    let k = &s.breakdown;
    assert_eq!(k.parameters, 4 * p);
    assert_eq!(k.gradients, 4 * p);
    assert_eq!(k.optimizer_state, 8 * p);
    assert_eq!(k.inputs, inputs);
    assert_eq!(k.transients, 2 * largest + 12);
    assert_eq!(k.saved_activations + k.activation_gradients, 0);
    assert_eq!(k.total(), s.peak_bytes);
    // Step 1's update of fc1's weight comes first, when only its own states exist: lower.
    let s1 = s.phase("step1.optimizer").unwrap();
    assert_eq!(s1.peak, 8 * p + inputs + 8 * 256 * 1024 + 2 * largest + 12);
    assert!(s1.peak < s.peak_bytes);
    // Every step's optimizer phase ends with weights and states only (grads set to None).
    for step in 1..=3 {
        let o = s.phase(&format!("step{step}.optimizer")).unwrap();
        assert_eq!(o.end, 12 * p + inputs);
    }
    // Forward of step 1: fc1's output (4 x 1024) and relu's output exist together at relu;
    // fc1's output is freed after it (relu saves its output, fc1 saves the input x).
    let f = s.phase("step1.forward").unwrap();
    assert_eq!(f.start, 4 * p + inputs);
    assert_eq!(
        event(&s, "step1.forward", "act").bytes,
        f.start + 2 * b * 1024 * 4
    );
    // At the end of forward: relu's output (saved by relu and fc2), cross entropy's
    // log-softmax (4 x 10; fc2's output itself is freed), total_weight and the loss (4 bytes
    // each).
    assert_eq!(
        f.end,
        f.start + b * 1024 * 4 + b * 10 * 4 + 4 + 4,
        "relu out + log_softmax + total_weight + loss"
    );
}

#[test]
fn cross_entropy_backward_holds_three_n_v() {
    // x [B, 64] -> linear 64 -> 4096 -> cross entropy. N = B rows, V = 4096 classes.
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"ce","family":"t","variant":"t","inputs":[
        {"name":"x","shape":["B",64],"dtype":"float32"},
        {"name":"y","shape":["B"],"dtype":"int64","classes":4096}],
        "nodes":[
        {"id":"fc","op":"linear","inputs":["x"],"attributes":{"in_features":64,"out_features":4096}},
        {"id":"loss","op":"cross_entropy","inputs":["fc","y"]}],"loss":"loss"}"#,
    );
    let (b, v) = (16u64, 4096u64);
    let s = sim(&g, b);
    let p = 64 * 4096 + 4096;
    let base = 4 * p + b * 64 * 4 + b * 8;
    let nv = b * v * 4;
    // Forward: logits and log-softmax together at the loss, then logits freed.
    let f = s.phase("step1.forward").unwrap();
    assert_eq!(f.peak, base + 2 * nv + 4 + 4);
    assert_eq!(f.end, base + nv + 4 + 4);
    // Backward at the loss: the saved log-softmax, nll_loss's N x V gradient and
    // log_softmax's N x V gradient at once, plus the root gradient (4 bytes), the loss and
    // total_weight (4 bytes each).
    let e = event(&s, "step1.backward", "loss");
    assert_eq!(e.bytes, base + 3 * nv + 4 + 4 + 4);
}

#[test]
fn a_skip_tensor_saved_twice_is_counted_once() {
    // act (relu output) is saved by relu (its output) and by fc2 (its input), and read again
    // by the add: one buffer. add saves nothing, so fc2's output dies at the add.
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"skip","family":"t","variant":"t","inputs":[
        {"name":"x","shape":["B",256],"dtype":"float32"},
        {"name":"y","shape":["B",256],"dtype":"float32"}],
        "nodes":[
        {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":256,"out_features":256}},
        {"id":"act","op":"relu","inputs":["fc1"]},
        {"id":"fc2","op":"linear","inputs":["act"],"attributes":{"in_features":256,"out_features":256}},
        {"id":"sum","op":"add","inputs":["fc2","act"]},
        {"id":"fc3","op":"linear","inputs":["sum"],"attributes":{"in_features":256,"out_features":256}},
        {"id":"loss","op":"mse","inputs":["fc3","y"]}],"loss":"loss"}"#,
    );
    let b = 8;
    let a = b * 256 * 4;
    let s = sim(&g, b);
    let f = s.phase("step1.forward").unwrap();
    // End of forward: act, sum, fc3's output (saved by mse) and the loss's input-sized buffer.
    assert_eq!(f.end - f.start, 4 * a);
    // Backward of the add hands the same gradient buffer to fc2 and to act's other use: no copy.
    // At fc2's backward: incoming gradient (shared with the add's other branch), fc2's input
    // gradient, plus fc3's and fc2's parameter gradients.
    let w = (256 * 256 + 256) * 4;
    let bw = s.phase("step1.backward").unwrap();
    let at_fc2 = event(&s, "step1.backward", "fc2");
    // Live before backward: act, sum, fc3 out, loss buffer (4a), target and x (inputs).
    // At fc2: sum and fc3 out are freed (fc3 and mse ran), act still saved (relu, fc2), the
    // shared gradient (a), the new gradient for act (a), two layers' grads, the root (4 bytes),
    // and the loss buffer.
    assert_eq!(at_fc2.bytes, bw.start - 4 * a + a + a + a + a + 2 * w + 4);
}

#[test]
fn permute_then_linear_saves_a_contiguous_copy() {
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"perm","family":"t","variant":"t","inputs":[
        {"name":"x","shape":["B",64,48],"dtype":"float32"},
        {"name":"y","shape":["B",48,32],"dtype":"float32"}],
        "nodes":[
        {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":48,"out_features":48}},
        {"id":"perm","op":"permute","inputs":["fc1"],"attributes":{"dims":[0,2,1]}},
        {"id":"fc2","op":"linear","inputs":["perm"],"attributes":{"in_features":64,"out_features":32}},
        {"id":"loss","op":"mse","inputs":["fc2","y"]}],"loss":"loss"}"#,
    );
    let b = 8;
    let s = sim(&g, b);
    let f = s.phase("step1.forward").unwrap();
    let h = b * 64 * 48 * 4; // fc1's output; the permute is a view of it
    let o = b * 48 * 32 * 4; // fc2's output
                             // At fc2: fc1's output, its contiguous copy (saved by fc2), fc2's output and 12 bytes of
                             // matmul scalars.
    assert_eq!(
        event(&s, "step1.forward", "fc2").bytes,
        f.start + 2 * h + o + 12
    );
    // After fc2 the permuted view dies and with it fc1's output; the copy stays (saved).
    // End: copy + fc2 out + the loss's buffer.
    assert_eq!(f.end, f.start + h + 2 * o);
    // The same graph with an identity permutation needs no copy.
    let g2 = graph(
        r#"{"format":"memcal-graph/1","name":"perm","family":"t","variant":"t","inputs":[
        {"name":"x","shape":["B",64,48],"dtype":"float32"},
        {"name":"y","shape":["B",64,32],"dtype":"float32"}],
        "nodes":[
        {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":48,"out_features":48}},
        {"id":"perm","op":"permute","inputs":["fc1"],"attributes":{"dims":[0,1,2]}},
        {"id":"fc2","op":"linear","inputs":["perm"],"attributes":{"in_features":48,"out_features":32}},
        {"id":"loss","op":"mse","inputs":["fc2","y"]}],"loss":"loss"}"#,
    );
    let s2 = sim(&g2, b);
    let f2 = s2.phase("step1.forward").unwrap();
    let o2 = b * 64 * 32 * 4;
    assert_eq!(f2.end, f2.start + h + 2 * o2);
    assert_eq!(event(&s2, "step1.forward", "fc2").bytes, f2.start + h + o2);
}

#[test]
fn a_tied_table_gradient_is_accumulated_in_place() {
    // The head reads the embedding's table: its gradient (table-size) is made at the head's
    // backward; the embedding's backward makes a second table-size gradient and adds it in
    // place, so both exist at that moment.
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"tied","family":"t","variant":"t","inputs":[
        {"name":"t","shape":["B",8],"dtype":"int64","classes":5000},
        {"name":"y","shape":["B",8],"dtype":"int64","classes":5000}],
        "nodes":[
        {"id":"emb","op":"embedding","inputs":["t"],"attributes":{"num_embeddings":5000,"embedding_dim":64}},
        {"id":"head","op":"linear","inputs":["emb"],"attributes":{"in_features":64,"out_features":5000,"bias":false,"tie":"emb"}},
        {"id":"loss","op":"cross_entropy","inputs":["head","y"]}],"loss":"loss"}"#,
    );
    let s = sim(&g, 2);
    let table = 5000 * 64 * 4;
    let at_head = event(&s, "step1.backward", "head");
    let at_emb = event(&s, "step1.backward", "emb");
    // Between the two: the head's saved input and incoming gradient go; the embedding's
    // backward adds a transient table.
    assert!(at_emb.bytes >= at_head.after + table);
    assert_eq!(s.parameters, 5000 * 64);
    // One table gradient survives into the optimizer phase: table, its gradient, two int64
    // inputs of 2 x 8.
    let o = s.phase("step1.optimizer").unwrap();
    assert_eq!(o.start, 2 * table + 2 * (2 * 8 * 8));
}

#[test]
fn dropout_zero_is_a_view_and_dropout_saves_a_float_mask() {
    let make = |p: &str| {
        graph(&format!(
            r#"{{"format":"memcal-graph/1","name":"d","family":"t","variant":"t","inputs":[
            {{"name":"x","shape":["B",128],"dtype":"float32"}},
            {{"name":"y","shape":["B",128],"dtype":"float32"}}],
            "nodes":[
            {{"id":"fc1","op":"linear","inputs":["x"],"attributes":{{"in_features":128,"out_features":128}}}},
            {{"id":"drop","op":"dropout","inputs":["fc1"],"attributes":{{"p":{p}}}}},
            {{"id":"fc2","op":"linear","inputs":["drop"],"attributes":{{"in_features":128,"out_features":128}}}},
            {{"id":"loss","op":"mse","inputs":["fc2","y"]}}],"loss":"loss"}}"#
        ))
    };
    let b = 4;
    let a = b * 128 * 4;
    let s0 = sim(&make("0.0"), b);
    let s1 = sim(&make("0.1"), b);
    let f0 = s0.phase("step1.forward").unwrap();
    let f1 = s1.phase("step1.forward").unwrap();
    // p = 0: fc1's output is fc2's saved input; then fc2 out + loss buffer.
    assert_eq!(f0.end - f0.start, 3 * a);
    // p > 0: fc1's output dies, dropout's output (fc2's input) and its float32 noise stay.
    assert_eq!(f1.end - f1.start, 4 * a);
}

#[test]
fn bf16_autocast_on_cuda_follows_autocast_and_its_weight_cache() {
    // WIDE_MLP under the cuda-bf16-autocast table, by hand from torch 2.11's autocast rules.
    let g = graph(WIDE_MLP);
    let b = 4;
    let s = simulate(&g, b, Precision::Bf16Autocast).expect("bf16-autocast has a rule table");
    assert_eq!(s.backend, "cuda-bf16-autocast");
    let p = 256 * 1024 + 1024 + 1024 * 10 + 10;
    let inputs = b * 256 * 4 + b * 8;
    let f = s.phase("step1.forward").unwrap();
    assert_eq!(f.start, 4 * p + inputs);
    // Forward end: the forward thread's cuBLAS (32 MiB) and cuBLASLt (1 MiB, fc1 and fc2 have
    // biases) workspaces; fc1's bf16 cast of its fp32 input (saved by addmm for W1's
    // gradient); W1's bf16 copy is not saved (fc1's input needs no gradient) and goes with the
    // cache; relu's bf16 output (saved by relu and fc2); W2's bf16 copy (saved: fc2's input
    // requires grad); cross entropy's bf16 log-softmax and the float32 copy nll_loss saves,
    // total_weight and the loss.
    let ws = 32 * 1024 * 1024 + 1024 * 1024;
    assert_eq!(
        f.end - f.start,
        ws + b * 256 * 2 + b * 1024 * 2 + 1024 * 10 * 2 + b * 10 * (2 + 4) + 4 + 4
    );
    // Backward ends with the fp32 gradients, autograd's thread's own 32 MiB workspace and the
    // 4-byte loss (dropped after the phase).
    let bw = s.phase("step1.backward").unwrap();
    assert_eq!(bw.end, 4 * p + inputs + ws + 32 * 1024 * 1024 + 4 * p + 4);
    // Optimizer: Adam states made at step 1; gradients set to None.
    let o = s.phase("step1.optimizer").unwrap();
    assert_eq!(o.end, 12 * p + inputs + ws + 32 * 1024 * 1024);
    // The replay rounds every tensor to 512 bytes: model_load holds the four parameter
    // tensors in their blocks, all in the large pool's segments or the small pool's.
    let d = s
        .device
        .as_ref()
        .expect("CUDA runs are replayed through the allocator model");
    let round = |x: u64| x.div_ceil(512) * 512;
    let load = d.phase("model_load").unwrap();
    assert_eq!(
        load.allocated_end,
        round(256 * 1024 * 4) + round(1024 * 4) + round(1024 * 10 * 4) + round(10 * 4)
    );
    // W1 (1 MiB) is a small-pool block: one 2 MiB segment holds W1, b1 and b2; W2 (40 KiB)
    // fits there too.
    assert_eq!(load.reserved_end, 2 * 1024 * 1024);
    assert!(d.reserved_peak >= d.allocated_peak);
    assert!(d.oom.is_none());
    // A cap below what the step needs is hit, in the phase that passes it.
    let capped = s.replay(Some(40 * 1024 * 1024));
    let oom = capped
        .oom
        .expect("a 40 MiB cap cannot hold two 32 MiB workspaces");
    assert_eq!(oom.phase, "step1.backward");
    assert!(simulate(&g, 0, Precision::Fp32).is_err());
}

#[test]
fn every_node_has_a_rule_with_a_source_and_the_timeline_is_complete() {
    let g = graph(WIDE_MLP);
    let s = sim(&g, 2);
    assert_eq!(s.rules.len(), g.nodes.len());
    for r in &s.rules {
        assert!(
            ["measured", "torch source", "assumed"].contains(&r.source)
                || r.source.starts_with("calibrated on sim-"),
            "{}",
            r.source
        );
        assert!(!r.note.is_empty(), "{} has no note", r.id);
    }
    // model_load, inputs, then forward/backward/optimizer for three steps.
    let names: Vec<&str> = s.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 2 + 9);
    assert_eq!(names[0], "model_load");
    assert_eq!(names[10], "step3.optimizer");
    // Steps 2 and 3 are identical; every phase ends where the next starts.
    for w in s.phases.windows(2) {
        if w[0].name.ends_with("backward") {
            // The loss is dropped between backward and the optimizer phase.
            assert_eq!(w[1].start, w[0].end - 4);
        } else {
            assert_eq!(w[1].start, w[0].end, "{} -> {}", w[0].name, w[1].name);
        }
    }
    let p2: Vec<u64> = s.phases[5..8].iter().map(|p| p.peak).collect();
    let p3: Vec<u64> = s.phases[8..11].iter().map(|p| p.peak).collect();
    assert_eq!(p2, p3);
    assert!(s.timeline.iter().all(|e| e.bytes <= s.peak_bytes));
    // The serde form carries the peak and the timeline.
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["peak_phase"], "step2.optimizer");
    assert!(json["timeline"].as_array().unwrap().len() > 20);
    let text = render_timeline(&s);
    assert!(text.contains("peak"));
    assert!(text.contains("step2.optimizer"));
    assert!(text.contains("<- peak"));
}

#[test]
fn every_zoo_graph_simulates_consistently() {
    // Every shipped graph: no double free (debug assertions), the breakdown sums to the peak,
    // phases chain, and the peak is at least the steady model state (16 bytes a parameter).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/graphs");
    let Ok(graphs) = memcal::graph::load_dir(&dir) else {
        return; // no zoo in this checkout
    };
    for g in graphs {
        for batch in [1, 3] {
            let s = sim(&g, batch);
            assert_eq!(s.breakdown.total(), s.peak_bytes, "{}", g.name);
            assert!(s.peak_bytes >= 16 * g.parameters(), "{}", g.name);
            let max_phase = s.phases.iter().map(|p| p.peak).max().unwrap();
            assert_eq!(max_phase, s.peak_bytes, "{}", g.name);
            for w in s.phases.windows(2) {
                assert!(
                    w[1].start <= w[0].end,
                    "{}: {} -> {}",
                    g.name,
                    w[0].name,
                    w[1].name
                );
            }
            // Every optimizer phase ends at weights + Adam states + inputs.
            let end = s.phase("step3.optimizer").unwrap().end;
            assert_eq!(end, s.phase("step2.optimizer").unwrap().end, "{}", g.name);
        }
    }
}

#[test]
fn a_dead_branch_lives_until_forward_returns_and_saves_nothing() {
    // `aux` reads fc1 but reaches no loss: the harness keeps its output until forward returns,
    // and autograd keeps nothing for it once it is dropped.
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"dead","family":"t","variant":"t","inputs":[
        {"name":"x","shape":["B",64],"dtype":"float32"},
        {"name":"y","shape":["B",64],"dtype":"float32"}],
        "nodes":[
        {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":64,"out_features":64}},
        {"id":"aux","op":"relu","inputs":["fc1"]},
        {"id":"fc2","op":"linear","inputs":["fc1"],"attributes":{"in_features":64,"out_features":64}},
        {"id":"loss","op":"mse","inputs":["fc2","y"]}],"loss":"loss"}"#,
    );
    let b = 4;
    let a = b * 64 * 4;
    let s = sim(&g, b);
    let f = s.phase("step1.forward").unwrap();
    // At the loss: fc1 (saved by fc2), aux (alive until forward returns), fc2's output and the
    // loss's buffer plus its forward temporary (a + 12 bytes).
    assert_eq!(
        event(&s, "step1.forward", "loss").bytes,
        f.start + 4 * a + a + 12
    );
    // After forward: aux is gone.
    assert_eq!(f.end, f.start + 3 * a);
}
