//! Recurrent families: `lstm-lm`, `gru`, `cnn-lstm`.

use super::transformer::start;
use super::{id, B};
use crate::graph::GraphFile;
use serde_json::{json, Value};

/// LSTM language model (Zaremba et al. 2014 layout): embedding, dropout, stacked LSTM, dropout,
/// untied decoder, cross-entropy over every token.
#[derive(Debug, Clone, Copy)]
struct LstmLm {
    vocab: u64,
    t: u64,
    hidden: u64,
    layers: u64,
    dropout: f64,
}

fn lstm_lm(variant: &str, c: LstmLm) -> GraphFile {
    let desc = format!(
        "LSTM language model: vocab {}, {} layers of {} (embedding {}), T={}, dropout {}, untied decoder",
        c.vocab, c.layers, c.hidden, c.hidden, c.t, c.dropout
    );
    let mut b = start("lstm-lm", variant, "lstm-lm-full", desc);
    let tokens = b.int_input("tokens", &[B, c.t], c.vocab);
    let labels = b.int_input("labels", &[B, c.t], c.vocab);
    let emb = b.node(
        "encoder",
        "embedding",
        &[&tokens],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.hidden}),
    );
    let d1 = b.node("drop_in", "dropout", &[&emb], json!({"p": c.dropout}));
    let rnn = b.node(
        "rnn",
        "lstm",
        &[&d1],
        json!({"input_size": c.hidden, "hidden_size": c.hidden, "num_layers": c.layers}),
    );
    let d2 = b.node("drop_out", "dropout", &[&rnn], json!({"p": c.dropout}));
    let logits = b.node(
        "decoder",
        "linear",
        &[&d2],
        json!({"in_features": c.hidden, "out_features": c.vocab}),
    );
    b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
    b.finish("loss")
}

/// GRU sequence classifier: embedding, bidirectional stacked GRU, last position, linear.
#[derive(Debug, Clone, Copy)]
struct Gru {
    vocab: u64,
    t: u64,
    emb: u64,
    hidden: u64,
    layers: u64,
    classes: u64,
}

fn gru(variant: &str, c: Gru) -> GraphFile {
    let desc = format!(
        "GRU sequence classifier: vocab {}, embedding {}, {} bidirectional GRU layers of {}, T={}, last position -> {} classes",
        c.vocab, c.emb, c.layers, c.hidden, c.t, c.classes
    );
    let mut b = start("gru", variant, "gru-full", desc);
    let tokens = b.int_input("tokens", &[B, c.t], c.vocab);
    let labels = b.int_input("labels", &[B], c.classes);
    let emb = b.node(
        "embedding",
        "embedding",
        &[&tokens],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.emb}),
    );
    let rnn = b.node(
        "gru",
        "gru",
        &[&emb],
        json!({"input_size": c.emb, "hidden_size": c.hidden, "num_layers": c.layers, "bidirectional": true}),
    );
    let last = b.node("last", "select_token", &[&rnn], json!({"index": -1}));
    let fc = b.node(
        "classifier",
        "linear",
        &[&last],
        json!({"in_features": 2 * c.hidden, "out_features": c.classes}),
    );
    b.node("loss", "cross_entropy", &[&fc, &labels], Value::Null);
    b.finish("loss")
}

/// CNN-LSTM for multichannel 1-D signals: three conv1d/batch-norm/ReLU/max-pool stages (8x
/// shorter), permute to time-major features, stacked LSTM, last position, linear.
#[derive(Debug, Clone, Copy)]
struct CnnLstm {
    leads: u64,
    samples: u64,
    channels: [u64; 3],
    hidden: u64,
    layers: u64,
    classes: u64,
}

fn cnn_lstm(variant: &str, c: CnnLstm) -> GraphFile {
    let desc = format!(
        "CNN-LSTM signal classifier: {} leads x {} samples, conv1d stages {:?} (each /2 by max pool), {} LSTM layers of {}, {} classes",
        c.leads, c.samples, c.channels, c.layers, c.hidden, c.classes
    );
    let mut b = start("cnn-lstm", variant, "cnn-lstm-full", desc);
    let sig = b.input("signal", &[B, c.leads, c.samples]);
    let labels = b.int_input("labels", &[B], c.classes);
    let mut x = sig;
    let mut inp = c.leads;
    for (i, (&o, k)) in c.channels.iter().zip([7u64, 5, 3]).enumerate() {
        let p = format!("conv{i}");
        let y = b.node(
            &id(&p, "conv"),
            "conv1d",
            &[&x],
            json!({"in_channels": inp, "out_channels": o, "kernel_size": k, "padding": k / 2, "bias": false}),
        );
        let y = b.node(
            &id(&p, "bn"),
            "batch_norm",
            &[&y],
            json!({"num_features": o}),
        );
        let y = b.node(&id(&p, "relu"), "relu", &[&y], Value::Null);
        x = b.node(
            &id(&p, "pool"),
            "max_pool",
            &[&y],
            json!({"kernel_size": 2}),
        );
        inp = o;
    }
    let seq = b.node(
        "to_time_major",
        "permute",
        &[&x],
        json!({"dims": [0, 2, 1]}),
    );
    let rnn = b.node(
        "lstm",
        "lstm",
        &[&seq],
        json!({"input_size": inp, "hidden_size": c.hidden, "num_layers": c.layers}),
    );
    let last = b.node("last", "select_token", &[&rnn], json!({"index": -1}));
    let fc = b.node(
        "classifier",
        "linear",
        &[&last],
        json!({"in_features": c.hidden, "out_features": c.classes}),
    );
    b.node("loss", "cross_entropy", &[&fc, &labels], Value::Null);
    b.finish("loss")
}

/// Every recurrent graph.
pub(crate) fn graphs() -> Vec<GraphFile> {
    let mut g = Vec::new();

    // Zaremba et al. (2014) "large" PTB model: 2 x 1500, vocab 10k, 35 steps (66M parameters).
    g.push(lstm_lm(
        "full",
        LstmLm {
            vocab: 10000,
            t: 35,
            hidden: 1500,
            layers: 2,
            dropout: 0.65,
        },
    ));
    for (v, t, hidden) in [("r1", 512, 256), ("r2", 512, 512), ("r3", 1024, 512)] {
        g.push(lstm_lm(
            v,
            LstmLm {
                vocab: 8192,
                t,
                hidden,
                layers: 2,
                dropout: 0.5,
            },
        ));
    }

    // Bidirectional 2-layer GRU text classifier (embedding 300, hidden 512, 30k vocab).
    g.push(gru(
        "full",
        Gru {
            vocab: 30000,
            t: 512,
            emb: 300,
            hidden: 512,
            layers: 2,
            classes: 5,
        },
    ));
    for (v, t, emb, hidden) in [
        ("r1", 1024, 256, 256),
        ("r2", 2048, 256, 384),
        ("r3", 2048, 256, 512),
    ] {
        g.push(gru(
            v,
            Gru {
                vocab: 8192,
                t,
                emb,
                hidden,
                layers: 2,
                classes: 5,
            },
        ));
    }

    // 12-lead ECG, 10 s at 500 Hz, 9 rhythm classes.
    g.push(cnn_lstm(
        "full",
        CnnLstm {
            leads: 12,
            samples: 5000,
            channels: [64, 128, 256],
            hidden: 512,
            layers: 2,
            classes: 9,
        },
    ));
    for (v, samples, channels, hidden) in [
        ("r1", 16384, [64, 128, 128], 256),
        ("r2", 32768, [64, 128, 256], 256),
        ("r3", 32768, [128, 256, 256], 256),
    ] {
        g.push(cnn_lstm(
            v,
            CnnLstm {
                leads: 12,
                samples,
                channels,
                hidden,
                layers: 2,
                classes: 9,
            },
        ));
    }
    g
}
