//! Convolutional and MLP families: `mlp`, `resnet`, `mobilenet`, `unet`, `conv1d-audio`.

use super::transformer::start;
use super::{id, Builder, B};
use crate::graph::GraphFile;
use serde_json::{json, Value};

/// conv2d without bias (followed by batch norm), square kernel.
fn conv_bn(
    b: &mut Builder,
    p: &str,
    x: &str,
    (i, o): (u64, u64),
    (k, s, pad, groups): (u64, u64, u64, u64),
    relu: bool,
) -> String {
    let attrs = if groups > 1 {
        json!({"in_channels": i, "out_channels": o, "kernel_size": k, "stride": s, "padding": pad, "groups": groups, "bias": false})
    } else {
        json!({"in_channels": i, "out_channels": o, "kernel_size": k, "stride": s, "padding": pad, "bias": false})
    };
    let c = b.node(&id(p, "conv"), "conv2d", &[x], attrs);
    let n = b.node(
        &id(p, "bn"),
        "batch_norm",
        &[&c],
        json!({"num_features": o}),
    );
    if relu {
        b.node(&id(p, "relu"), "relu", &[&n], Value::Null)
    } else {
        n
    }
}

/// Global average pool, flatten, linear classifier and cross-entropy against `labels`.
fn classify(b: &mut Builder, x: &str, c: u64, classes: u64, labels: &str) -> String {
    let pool = b.node(
        "avgpool",
        "adaptive_avg_pool",
        &[x],
        json!({"output_size": 1}),
    );
    let flat = b.node("flatten", "flatten", &[&pool], json!({"start_dim": 1}));
    let fc = b.node(
        "fc",
        "linear",
        &[&flat],
        json!({"in_features": c, "out_features": classes}),
    );
    b.node("loss", "cross_entropy", &[&fc, labels], Value::Null)
}

// ---------------------------------------------------------------------------------------------
// mlp

#[derive(Debug, Clone, Copy)]
struct Mlp {
    rows: u64,
    features: u64,
    hidden: u64,
    depth: u64,
    classes: u64,
}

fn mlp(variant: &str, c: Mlp) -> GraphFile {
    let desc = format!(
        "MLP classifier applied row-wise: {} rows of {} features, {} hidden layers of {} (ReLU), {} classes",
        c.rows, c.features, c.depth, c.hidden, c.classes
    );
    let mut b = start("mlp", variant, "mlp-full", desc);
    let x0 = b.input("features", &[B, c.rows, c.features]);
    let labels = b.int_input("labels", &[B, c.rows], c.classes);
    let mut x = x0;
    let mut width = c.features;
    for l in 0..c.depth {
        let p = format!("layers{l}");
        let fc = b.node(
            &id(&p, "linear"),
            "linear",
            &[&x],
            json!({"in_features": width, "out_features": c.hidden}),
        );
        x = b.node(&id(&p, "relu"), "relu", &[&fc], Value::Null);
        width = c.hidden;
    }
    let out = b.node(
        "head",
        "linear",
        &[&x],
        json!({"in_features": width, "out_features": c.classes}),
    );
    b.node("loss", "cross_entropy", &[&out, &labels], Value::Null);
    b.finish("loss")
}

// ---------------------------------------------------------------------------------------------
// resnet (torchvision bottleneck ResNet)

#[derive(Debug, Clone, Copy)]
struct Resnet {
    image: u64,
    width: u64,
    blocks: [u64; 4],
    classes: u64,
}

fn resnet(variant: &str, c: Resnet) -> GraphFile {
    let desc = format!(
        "Bottleneck ResNet (torchvision layout): {}x{} images, base width {}, blocks {:?}, {} classes",
        c.image, c.image, c.width, c.blocks, c.classes
    );
    let mut b = start("resnet", variant, "resnet50", desc);
    let img = b.input("images", &[B, 3, c.image, c.image]);
    let labels = b.int_input("labels", &[B], c.classes);
    let stem = conv_bn(&mut b, "stem", &img, (3, c.width), (7, 2, 3, 1), true);
    let mut x = b.node(
        "maxpool",
        "max_pool",
        &[&stem],
        json!({"kernel_size": 3, "stride": 2, "padding": 1}),
    );
    let mut inp = c.width;
    for (stage, &n) in c.blocks.iter().enumerate() {
        let planes = c.width << stage;
        let out = planes * 4;
        for blk in 0..n {
            let p = format!("layer{}.{blk}", stage + 1);
            let stride = if blk == 0 && stage > 0 { 2 } else { 1 };
            let a = conv_bn(&mut b, &id(&p, "1"), &x, (inp, planes), (1, 1, 0, 1), true);
            let a = conv_bn(
                &mut b,
                &id(&p, "2"),
                &a,
                (planes, planes),
                (3, stride, 1, 1),
                true,
            );
            let a = conv_bn(&mut b, &id(&p, "3"), &a, (planes, out), (1, 1, 0, 1), false);
            let short = if stride != 1 || inp != out {
                conv_bn(
                    &mut b,
                    &id(&p, "downsample"),
                    &x,
                    (inp, out),
                    (1, stride, 0, 1),
                    false,
                )
            } else {
                x.clone()
            };
            let sum = b.node(&id(&p, "add"), "add", &[&a, &short], Value::Null);
            x = b.node(&id(&p, "relu"), "relu", &[&sum], Value::Null);
            inp = out;
        }
    }
    classify(&mut b, &x, inp, c.classes, &labels);
    b.finish("loss")
}

// ---------------------------------------------------------------------------------------------
// mobilenet (torchvision MobileNetV2; ReLU6 written as relu, same parameters)

#[derive(Debug, Clone, Copy)]
struct Mobilenet {
    image: u64,
    /// Width multiplier in percent.
    width_pct: u64,
    classes: u64,
}

/// torchvision's `_make_divisible(v, 8)` for `v = c * pct / 100`.
fn divisible(c: u64, pct: u64) -> u64 {
    let v = c as f64 * pct as f64 / 100.0;
    let mut n = (((v + 4.0) as u64) / 8 * 8).max(8);
    if (n as f64) < 0.9 * v {
        n += 8;
    }
    n
}

fn mobilenet(variant: &str, c: Mobilenet) -> GraphFile {
    let desc = format!(
        "MobileNetV2 (torchvision, depthwise convs via groups, ReLU6 as relu): {}x{} images, width x{:.2}, {} classes",
        c.image,
        c.image,
        c.width_pct as f64 / 100.0,
        c.classes
    );
    let mut b = start("mobilenet", variant, "mobilenet-full", desc);
    let img = b.input("images", &[B, 3, c.image, c.image]);
    let labels = b.int_input("labels", &[B], c.classes);
    let mut inp = divisible(32, c.width_pct);
    let mut x = conv_bn(&mut b, "features0", &img, (3, inp), (3, 2, 1, 1), true);
    let settings: [(u64, u64, u64, u64); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut idx = 1;
    for (t, ch, n, s) in settings {
        let out = divisible(ch, c.width_pct);
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let p = format!("features{idx}");
            let hidden = inp * t;
            let mut h = x.clone();
            if t != 1 {
                h = conv_bn(
                    &mut b,
                    &id(&p, "expand"),
                    &h,
                    (inp, hidden),
                    (1, 1, 0, 1),
                    true,
                );
            }
            h = conv_bn(
                &mut b,
                &id(&p, "dw"),
                &h,
                (hidden, hidden),
                (3, stride, 1, hidden),
                true,
            );
            h = conv_bn(
                &mut b,
                &id(&p, "project"),
                &h,
                (hidden, out),
                (1, 1, 0, 1),
                false,
            );
            x = if stride == 1 && inp == out {
                b.node(&id(&p, "add"), "add", &[&x, &h], Value::Null)
            } else {
                h
            };
            inp = out;
            idx += 1;
        }
    }
    let last = divisible(1280, c.width_pct.max(100));
    let x = conv_bn(
        &mut b,
        &format!("features{idx}"),
        &x,
        (inp, last),
        (1, 1, 0, 1),
        true,
    );
    let pool = b.node(
        "avgpool",
        "adaptive_avg_pool",
        &[&x],
        json!({"output_size": 1}),
    );
    let flat = b.node("flatten", "flatten", &[&pool], json!({"start_dim": 1}));
    let drop = b.node("classifier.dropout", "dropout", &[&flat], json!({"p": 0.2}));
    let fc = b.node(
        "classifier.linear",
        "linear",
        &[&drop],
        json!({"in_features": last, "out_features": c.classes}),
    );
    b.node("loss", "cross_entropy", &[&fc, &labels], Value::Null);
    b.finish("loss")
}

// ---------------------------------------------------------------------------------------------
// unet

#[derive(Debug, Clone, Copy)]
struct Unet {
    image: u64,
    in_channels: u64,
    base: u64,
    /// Number of down (and up) steps.
    depth: u32,
    classes: u64,
    /// Nearest upsample + 1x1 conv instead of a transposed conv.
    upsample: bool,
}

fn double_conv(b: &mut Builder, p: &str, x: &str, i: u64, o: u64) -> String {
    let a = conv_bn(b, &id(p, "1"), x, (i, o), (3, 1, 1, 1), true);
    conv_bn(b, &id(p, "2"), &a, (o, o), (3, 1, 1, 1), true)
}

fn unet(variant: &str, c: Unet) -> GraphFile {
    let desc = format!(
        "U-Net (same-padded double 3x3 conv + batch norm, skip concats): {}x{}x{} images, base {} channels, depth {}, {} ({} classes per pixel)",
        c.in_channels,
        c.image,
        c.image,
        c.base,
        c.depth,
        if c.upsample {
            "nearest upsample + 1x1 conv"
        } else {
            "transposed-conv upsampling"
        },
        c.classes
    );
    let mut b = start("unet", variant, "unet-full", desc);
    let img = b.input("images", &[B, c.in_channels, c.image, c.image]);
    let labels = b.int_input("labels", &[B, c.image, c.image], c.classes);
    let mut skips = Vec::new();
    let mut x = double_conv(&mut b, "inc", &img, c.in_channels, c.base);
    let mut ch = c.base;
    for i in 0..c.depth {
        skips.push((x.clone(), ch));
        let p = format!("down{}", i + 1);
        let pool = b.node(
            &id(&p, "pool"),
            "max_pool",
            &[&x],
            json!({"kernel_size": 2}),
        );
        x = double_conv(&mut b, &p, &pool, ch, ch * 2);
        ch *= 2;
    }
    for i in 0..c.depth {
        let p = format!("up{}", i + 1);
        let (skip, skip_ch) = skips.pop().expect("one skip per level");
        let up = if c.upsample {
            let u = b.node(
                &id(&p, "upsample"),
                "upsample",
                &[&x],
                json!({"scale_factor": 2}),
            );
            b.node(
                &id(&p, "reduce"),
                "conv2d",
                &[&u],
                json!({"in_channels": ch, "out_channels": ch / 2, "kernel_size": 1}),
            )
        } else {
            b.node(
                &id(&p, "up"),
                "conv_transpose2d",
                &[&x],
                json!({"in_channels": ch, "out_channels": ch / 2, "kernel_size": 2, "stride": 2}),
            )
        };
        let cat = b.node(
            &id(&p, "concat"),
            "concat",
            &[&skip, &up],
            json!({"dim": 1}),
        );
        x = double_conv(&mut b, &p, &cat, skip_ch + ch / 2, skip_ch);
        ch = skip_ch;
    }
    let logits = b.node(
        "outc",
        "conv2d",
        &[&x],
        json!({"in_channels": ch, "out_channels": c.classes, "kernel_size": 1}),
    );
    let last = b.node(
        "classes_last",
        "permute",
        &[&logits],
        json!({"dims": [0, 2, 3, 1]}),
    );
    b.node("loss", "cross_entropy", &[&last, &labels], Value::Null);
    b.finish("loss")
}

// ---------------------------------------------------------------------------------------------
// conv1d-audio (wav2vec 2.0 style feature encoder + utterance classifier)

#[derive(Debug, Clone, Copy)]
struct Audio {
    samples: u64,
    channels: u64,
    proj: u64,
    classes: u64,
}

fn audio(variant: &str, c: Audio) -> GraphFile {
    let desc = format!(
        "wav2vec 2.0 style conv1d feature encoder ({} channels, kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2, group norm on the first, GELU) on {} raw samples, layer norm + projection to {}, mean pool, {} classes",
        c.channels, c.samples, c.proj, c.classes
    );
    let mut b = start("conv1d-audio", variant, "conv1d-audio-full", desc);
    let wav = b.input("waveform", &[B, 1, c.samples]);
    let labels = b.int_input("labels", &[B], c.classes);
    let mut x = wav;
    let mut inp = 1;
    for (l, (k, s)) in [(10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)]
        .into_iter()
        .enumerate()
    {
        let p = format!("feature_extractor.conv{l}");
        let mut y = b.node(
            &id(&p, "conv"),
            "conv1d",
            &[&x],
            json!({"in_channels": inp, "out_channels": c.channels, "kernel_size": k, "stride": s, "bias": false}),
        );
        if l == 0 {
            y = b.node(
                &id(&p, "group_norm"),
                "group_norm",
                &[&y],
                json!({"num_groups": c.channels, "num_channels": c.channels}),
            );
        }
        x = b.node(&id(&p, "gelu"), "gelu", &[&y], Value::Null);
        inp = c.channels;
    }
    let t = b.node(
        "feature_projection.transpose",
        "permute",
        &[&x],
        json!({"dims": [0, 2, 1]}),
    );
    let ln = b.node(
        "feature_projection.layer_norm",
        "layer_norm",
        &[&t],
        json!({"normalized_shape": c.channels}),
    );
    let proj = b.node(
        "feature_projection.projection",
        "linear",
        &[&ln],
        json!({"in_features": c.channels, "out_features": c.proj}),
    );
    let back = b.node(
        "pool.transpose",
        "permute",
        &[&proj],
        json!({"dims": [0, 2, 1]}),
    );
    classify(&mut b, &back, c.proj, c.classes, &labels);
    b.finish("loss")
}

/// Every convolutional and MLP graph.
pub(crate) fn graphs() -> Vec<GraphFile> {
    let mut g = vec![
        mlp(
            "full",
            Mlp {
                rows: 64,
                features: 2048,
                hidden: 4096,
                depth: 4,
                classes: 1000,
            },
        ),
        mlp(
            "r1",
            Mlp {
                rows: 4096,
                features: 256,
                hidden: 512,
                depth: 4,
                classes: 100,
            },
        ),
        mlp(
            "r2",
            Mlp {
                rows: 8192,
                features: 256,
                hidden: 640,
                depth: 3,
                classes: 100,
            },
        ),
        mlp(
            "r3",
            Mlp {
                rows: 8192,
                features: 256,
                hidden: 384,
                depth: 6,
                classes: 100,
            },
        ),
    ];

    // ResNet-50: 25,557,032 parameters.
    g.push(resnet(
        "full",
        Resnet {
            image: 224,
            width: 64,
            blocks: [3, 4, 6, 3],
            classes: 1000,
        },
    ));
    for (v, image, width, blocks) in [
        ("r1", 128, 48, [3, 4, 6, 3]),
        ("r2", 96, 64, [3, 4, 6, 3]),
        ("r3", 128, 64, [3, 4, 6, 3]),
    ] {
        g.push(resnet(
            v,
            Resnet {
                image,
                width,
                blocks,
                classes: 100,
            },
        ));
    }

    // MobileNetV2: 3,504,872 parameters.
    g.push(mobilenet(
        "full",
        Mobilenet {
            image: 224,
            width_pct: 100,
            classes: 1000,
        },
    ));
    for (v, image, width_pct) in [("r1", 128, 140), ("r2", 128, 200), ("r3", 128, 260)] {
        g.push(mobilenet(
            v,
            Mobilenet {
                image,
                width_pct,
                classes: 100,
            },
        ));
    }

    // U-Net (Ronneberger et al. widths 64..1024, same padding, batch norm).
    g.push(unet(
        "full",
        Unet {
            image: 512,
            in_channels: 3,
            base: 64,
            depth: 4,
            classes: 2,
            upsample: false,
        },
    ));
    for (v, image, base, depth, upsample) in [
        ("r1", 128, 24, 4, false),
        ("r2", 128, 32, 4, false),
        ("r3", 128, 48, 4, true),
    ] {
        g.push(unet(
            v,
            Unet {
                image,
                in_channels: 3,
                base,
                depth,
                classes: 2,
                upsample,
            },
        ));
    }

    // wav2vec 2.0 feature encoder (512 channels) on 1 s of 16 kHz audio, 35 keywords.
    g.push(audio(
        "full",
        Audio {
            samples: 16000,
            channels: 512,
            proj: 768,
            classes: 35,
        },
    ));
    for (v, samples, channels, proj) in [
        ("r1", 48000, 256, 256),
        ("r2", 64000, 384, 384),
        ("r3", 64000, 512, 768),
    ] {
        g.push(audio(
            v,
            Audio {
                samples,
                channels,
                proj,
                classes: 35,
            },
        ));
    }
    g
}
