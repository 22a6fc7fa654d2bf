//! Override entries for CPU kernels' scratch and backward helpers of indexing, scatter,
//! upsample, masked, sparse, fft, loss and copy ops: see [`super`]. Sorted by op name.

use super::{contiguous_strides, wrap, Call, Override};
use crate::ops::generic::AtenValue;

/// Float argument `name` as given (an int given for it counts; None: left out or None).
fn float(c: &Call, name: &str) -> Option<f64> {
    match c.value(name)? {
        AtenValue::Float(v) => Some(*v),
        AtenValue::Int(v) => Some(*v as f64),
        _ => None,
    }
}

/// Whether tensor argument `name` is an int32 tensor (4-byte elements of an index argument).
fn is_int32_index(c: &Call, name: &str) -> bool {
    c.numel(name) > 0 && c.elem(name) == 4
}

/// `index.to(kLong)`: an int32 index made int64 before the kernel runs (gather, scatter).
fn int32_index_as_long(c: &Call) -> u64 {
    if is_int32_index(c, "index") {
        c.numel("index").saturating_mul(8)
    } else {
        0
    }
}

/// The interpolated axes of an upsample call: (input size, output size, scale argument) per
/// axis after batch and channels.
fn upsample_axes(c: &Call, scales: &[&str]) -> Vec<(u64, u64, Option<f64>)> {
    let (i, o) = (c.dims("self"), c.out_dims(0));
    let k = scales.len();
    if i.len() < k || o.len() < k {
        return Vec::new();
    }
    (0..k)
        .map(|a| {
            let d = i.len() - k + a;
            (i[d], o[o.len() - k + a], float(c, scales[a]))
        })
        .collect()
}

/// `HelperInterpBase::init_indices_weights` for every interpolated axis
/// (`upsample_generic_Nd_kernel_impl`): `interp_size` pairs of an int64 index and a weight
/// of the input's dtype, each the axis's output length (nearest: one pair, its weight
/// `at::ones`). All alive until the TensorIterator has run.
fn generic_nd_indices_weights(c: &Call, scales: &[&str], interp_size: u64) -> u64 {
    let e = c.elem("self");
    upsample_axes(c, scales)
        .iter()
        .map(|&(_, out, _)| interp_size * out * (8 + e))
        .sum()
}

/// `area_pixel_compute_scale<float>` (UpSample.h): `(in - 1) / (out - 1)` with
/// `align_corners`, else `compute_scales_value`: `1 / scale` when a positive scale is given,
/// else `in / out`.
fn area_pixel_scale(input: u64, output: u64, align_corners: bool, scale: Option<f64>) -> f32 {
    if align_corners {
        if output > 1 {
            (input - 1) as f32 / (output - 1) as f32
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => input as f32 / output.max(1) as f32,
        }
    }
}

/// `_compute_index_ranges_weights` (antialias): three int64 tensors of the output length
/// (xmin, size, stride), the weights (`output * max_interp_size` of the dtype) and their
/// int64 offsets; `max_interp_size = ceil(support) * 2 + 1`, `support = interp_size / 2`
/// times the scale when it is at least 1.
fn aa_index_ranges_weights(
    input: u64,
    output: u64,
    align_corners: bool,
    scale: Option<f64>,
    interp_size: u64,
    e: u64,
) -> u64 {
    let s = area_pixel_scale(input, output, align_corners, scale);
    let half = interp_size as f32 * 0.5;
    let support = if s >= 1.0 { half * s } else { half };
    let max_interp = support.ceil() as u64 * 2 + 1;
    4 * output * 8 + output * max_interp * e
}

/// `separable_upsample_generic_Nd_kernel_impl` (antialias): the last axis first, then the
/// others from the inside out, each only when its size changes; every pass but the last
/// writes a new temporary of the input's shape with the axes done so far at their output
/// size; a pass holds its input, its output and its index ranges and weights.
fn separable_aa_scratch(c: &Call, scales: &[&str], interp_size: u64) -> u64 {
    let axes = upsample_axes(c, scales);
    let e = c.elem("self");
    let align = c.flag("align_corners").unwrap_or(false);
    let mut shape = c.dims("self");
    let k = axes.len();
    let mut passes = (0..k).rev().filter(|&a| axes[a].0 != axes[a].1).count();
    let (mut peak, mut held) = (0u64, 0u64);
    for a in (0..k).rev() {
        let (i, o, s) = axes[a];
        if i == o {
            continue;
        }
        passes -= 1;
        let d = shape.len() - k + a;
        shape[d] = o;
        let temp = if passes > 0 {
            shape.iter().product::<u64>() * e
        } else {
            0
        };
        let weights = aa_index_ranges_weights(i, o, align, s, interp_size, e);
        peak = peak.max(held + temp + weights);
        held = temp;
    }
    peak
}

/// c10's `is_contiguous(ChannelsLast)` of a contiguous NCHW tensor (strides of `dims`).
fn contiguous_is_channels_last(dims: &[u64]) -> bool {
    if dims.len() != 4 {
        return false;
    }
    let st = contiguous_strides(dims);
    let mut expected = 1u64;
    for d in [1, 3, 2, 0] {
        if dims[d] != 1 {
            if st[d] != expected {
                return false;
            }
            expected *= dims[d];
        }
    }
    true
}

/// upsample_bilinear2d's float kernel (`upsample_bilinear2d_kernel_impl_float`): the
/// channels-last kernel when `_use_vectorized_kernel_cond_2d` holds (a channels-last input
/// of more than 3 channels, or `out_h + out_w <= 128`), which works on
/// `input.contiguous(ChannelsLast)` and `output.contiguous(ChannelsLast)` (copies of a
/// channels-first input and output) and copies the result back; else the generic kernel's
/// two index and weight pairs per axis.
fn bilinear2d_scratch(c: &Call) -> u64 {
    let (i, o) = (c.dims("self"), c.out_dims(0));
    if i.len() != 4 || o.len() != 4 {
        return 0;
    }
    let input_cl = contiguous_is_channels_last(&i);
    if (input_cl && i[1] > 3) || o[2] + o[3] <= 128 {
        let copy = |dims: &[u64], bytes: u64| {
            if contiguous_is_channels_last(dims) {
                0
            } else {
                bytes
            }
        };
        copy(&i, c.bytes("self")) + copy(&o, c.out_bytes(0))
    } else {
        generic_nd_indices_weights(c, &["scales_h", "scales_w"], 2)
    }
}

/// The (sizes, element bytes) of each tensor in tensor-list argument `name`.
fn list_tensors(c: &Call, name: &str) -> Vec<(Vec<u64>, u64)> {
    let Some(AtenValue::List(l)) = c.value(name) else {
        return Vec::new();
    };
    l.iter()
        .filter_map(|v| match v {
            AtenValue::Input(i) => c.inputs.get(*i),
            _ => None,
        })
        .map(|x| {
            let dims: Vec<u64> = x.shape.0.iter().map(|d| d.at(c.batch)).collect();
            let n = x.shape.numel_at(c.batch);
            let e = x.bytes.checked_div(n).unwrap_or(4);
            (dims, e)
        })
        .collect()
}

/// `_pad_chunk` (TensorShape.cpp, for `_chunk_cat`): a tensor whose `dim` is not a multiple
/// of `num_chunks` is copied into `tensor.new_zeros(padded_size)` (its `dim` rounded up to
/// the multiple); the others are reshaped views. All are alive while `at::cat` writes the
/// output.
fn chunk_cat_padding(c: &Call) -> u64 {
    let chunks = c.int("num_chunks").unwrap_or(1).max(1) as u64;
    let tensors = list_tensors(c, "tensors");
    let Some(rank) = tensors.first().map(|t| t.0.len()) else {
        return 0;
    };
    let dim = wrap(c.int("dim").unwrap_or(0), rank);
    tensors
        .iter()
        .filter(|(d, _)| d.get(dim).is_some_and(|&n| n % chunks != 0))
        .map(|(d, e)| {
            let padded = d[dim].div_ceil(chunks) * chunks;
            let rest: u64 = d
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != dim)
                .map(|(_, &x)| x)
                .product();
            padded * rest * e
        })
        .sum()
}

/// `_maybe_overlapping_memory` (FunctionsManual.cpp): the axes by stride, each stride beyond
/// the furthest element the smaller ones reach.
fn maybe_overlapping(sizes: &[u64], strides: &[i64]) -> bool {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&k| strides[k]);
    let mut reach = 0i64;
    for k in order {
        if strides[k] <= reach {
            return true;
        }
        reach += strides[k] * (sizes[k] as i64 - 1);
    }
    false
}

/// `as_strided_backward` (FunctionsManual.cpp), for as_strided and as_strided_copy: the
/// output geometry less its size-1 axes; when it may overlap, `at::arange(0, base_size,
/// kLong)` and `out_indices.reshape(-1)` (a copy: an overlapping view is not contiguous), the
/// int64 index of `storage.index_add_`, beside the result `storage`. The input is taken as
/// a dense tensor at storage offset 0 (its geometry is not in the graph), so it does not
/// overlap and `base_size` is the larger of its numel and the output's reach.
fn as_strided_backward_temporaries(c: &Call, _: &str) -> Option<u64> {
    let (size, stride) = (c.ints("size"), c.ints("stride"));
    if size.len() != stride.len() || size.contains(&0) {
        return Some(0);
    }
    let (sizes, strides): (Vec<u64>, Vec<i64>) = size
        .iter()
        .zip(&stride)
        .filter(|&(&n, &s)| n != 1 && s != 0)
        .map(|(&n, &s)| (n as u64, s))
        .unzip();
    if !maybe_overlapping(&sizes, &strides) {
        return Some(0);
    }
    let offset = c.int("storage_offset").unwrap_or(0).max(0) as u64;
    let reach = offset
        + 1
        + sizes
            .iter()
            .zip(&strides)
            .map(|(&n, &s)| (n - 1) * s.max(0) as u64)
            .sum::<u64>();
    let base = reach.max(c.numel("self"));
    Some(base * 8 + sizes.iter().product::<u64>() * 8)
}

/// Bytes of the tensors of the `indices` list (`Tensor?[]`; None entries hold nothing): the
/// `at::clamp`ed copies `_unsafe_masked_index` and its backward make of each.
fn clamped_indices(c: &Call) -> u64 {
    list_tensors(c, "indices")
        .iter()
        .map(|(d, e)| d.iter().product::<u64>() * e)
        .sum()
}

/// `_unsafe_masked_index(self, mask, indices, fill)` (TensorAdvancedIndexing.cpp): the
/// clamped indices, `self._unsafe_index(clamped)` (a tensor of `values` bytes) and
/// `at::logical_not(mask)` (one byte an element), all alive while `result.masked_fill(..)`
/// makes its copy (the returned tensor, not counted here).
fn unsafe_masked_index_scratch(c: &Call, values: u64) -> u64 {
    clamped_indices(c) + values + c.numel("mask")
}

/// `_unsafe_masked_index_put_accumulate(self, mask, indices, values)`
/// (TensorAdvancedIndexing.cpp): the clamped indices, then `values.masked_fill(
/// at::logical_not(mask), 0)` (the bool and the masked copy of `values`), then
/// `self._unsafe_index_put(clamped, masked_value, true)`, whose `index_put` clones `self`
/// (the returned tensor) beside the masked values. The highest point over the result.
fn unsafe_masked_index_put_scratch(c: &Call, values: u64) -> u64 {
    let idx = clamped_indices(c);
    let result = c.bytes("self");
    let masking = idx + c.numel("mask") + values;
    let putting = idx + values + result;
    masking.max(putting) - result
}

/// `fft_r2c_backward` (FunctionsManual.cpp): `at::real(at::_fft_c2c(full, dim, norm,
/// false))`, a real view of a complex tensor of the input's shape (twice its bytes); a
/// onesided transform first pads the gradient with `grad.new_zeros(full shape)` (complex,
/// the input's shape) when the last transformed axis was halved. The view is strided: the
/// result drawn at the input's size is the dense copy its consumer (a leaf's
/// `AccumulateGrad`) makes once the padded gradient is gone.
fn fft_r2c_backward_temporaries(c: &Call, _: &str) -> Option<u64> {
    let d = c.dims("self");
    let full = c.numel("self") * 2 * c.elem("self");
    let last = c.ints("dim").last().map(|&k| wrap(k, d.len()));
    let padded = c.flag("onesided").unwrap_or(false)
        && last.is_some_and(|k| c.out_dims(0).get(k) < d.get(k));
    Some(if padded {
        (2 * full).saturating_sub(c.bytes("self")).max(full)
    } else {
        full
    })
}

/// `ctc_loss_backward_cpu_template`: the result `grad = at::full_like(log_probs, neginf)`
/// and `log_beta = at::empty_like(log_alpha)`, the saved second return's size, alive while
/// the kernel runs.
fn ctc_loss_backward_temporaries(c: &Call, _: &str) -> Option<u64> {
    Some(c.out_bytes(1))
}

/// Elements of the broadcast shape of tensor arguments `a` and `b` (`infer_size`).
fn broadcast_numel(c: &Call, a: &str, b: &str) -> u64 {
    let (x, y) = (c.dims(a), c.dims(b));
    let r = x.len().max(y.len());
    (0..r)
        .map(|k| {
            let at = |d: &[u64]| (k + d.len()).checked_sub(r).map_or(1, |i| d[i]);
            at(&x).max(at(&y))
        })
        .product()
}

/// `masked_select_out_impl_cpu` (TensorAdvancedIndexing.cpp): `expand_outplace(mask,
/// self)`, then `_mask->sum()`, whose reduction makes the bool mask int64 first
/// (ReduceOps.cpp `make_reduction_from_out_ty`: `self.to(out_dtype)`; the broadcast shape,
/// 8 bytes an element) before the result exists; then the serial kernel when both expanded
/// tensors are contiguous (nothing broadcast) and `self` has fewer than GRAIN_SIZE (32768)
/// elements, else the prefix-sum kernel's `mask_long` and `mask_prefix_sum` (int64, the
/// broadcast shape) beside the result.
fn masked_select_scratch(c: &Call) -> u64 {
    let nb = broadcast_numel(c, "self", "mask");
    let out = c.out_bytes(0);
    let summing = nb * 8 + 8;
    let serial = c.numel("self") < 32768 && c.numel("self") == nb && c.numel("mask") == nb;
    let highest = if serial {
        summing
    } else {
        summing.max(out + 16 * nb)
    };
    highest.saturating_sub(out)
}

/// `make_offset2bag` (EmbeddingBag.cpp) when the forward left `offset2bag` empty: the int64
/// `zeros({indices.size(0) + 1})` it fills (None: the forward's is used).
fn offset2bag_made(c: &Call) -> Option<u64> {
    (c.out_numel(1) == 0 && c.numel("indices") > 0).then(|| (c.numel("indices") + 1) * 8)
}

/// The backward of `_embedding_bag` (EmbeddingBag.cpp), dense, mode sum or mean.
/// per_sample_weights (`_embedding_bag_per_sample_weights_backward_cpu_template`): the result
/// `zeros({num_samples})`, then `make_offset2bag`: `index_add_` of `ones_like(offsets)`, and
/// `offset2bag.cumsum(0)` beside the old one. weight (`_embedding_bag_backward_symint`): the
/// same `offset2bag`, then `_embedding_bag_dense_backward_cpu`'s result `zeros({num_weights,
/// D})` and `_embedding_bag_dense_backward_cpu_sum_mean`'s `indices_.sort()` (sorted values
/// and int64 positions, the sort's int64 arange while it runs), then `offset2bag_.index_select`
/// and `per_sample_weights_.index_select` by the sort's positions.
fn embedding_bag_backward_temporaries(c: &Call, arg: &str) -> Option<u64> {
    let o2b = offset2bag_made(c).unwrap_or(0);
    let making = if o2b > 0 {
        o2b + (c.numel("offsets") * 8).max(o2b)
    } else {
        0
    };
    if arg == "per_sample_weights" {
        return Some(making);
    }
    let n = c.numel("indices");
    let ie = c.elem("indices");
    let psw = c.bytes("per_sample_weights");
    let sorting = n * ie + n * 8 + (n * 8).max(n * ie + psw);
    let grad_weight = c.bytes("weight");
    Some(making.saturating_sub(grad_weight).max(o2b + sorting))
}

const UPSAMPLE_CITE: &str = "aten/src/ATen/native/cpu/UpSampleKernel.cpp: upsample_generic_Nd_kernel_impl, HelperInterpBase::init_indices_weights";

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "_chunk_cat.default",
        read_from: "aten/src/ATen/native/TensorShape.cpp: _chunk_cat, _pad_chunk",
        forward_scratch: Some(chunk_cat_padding),
        backward_temporaries: None,
        approximates: Some("contiguous inputs (a strided one's `reshape` may copy)"),
    },
    Override {
        op: "_ctc_loss.Tensor",
        read_from: "aten/src/ATen/native/LossCTC.cpp: ctc_loss_backward_cpu_template (the Tensor overload calls the IntArrayRef one)",
        forward_scratch: None,
        backward_temporaries: Some(ctc_loss_backward_temporaries),
        approximates: None,
    },
    Override {
        op: "_ctc_loss.default",
        read_from: "aten/src/ATen/native/LossCTC.cpp: ctc_loss_backward_cpu_template",
        forward_scratch: None,
        backward_temporaries: Some(ctc_loss_backward_temporaries),
        approximates: None,
    },
    Override {
        op: "_embedding_bag.default",
        read_from: "aten/src/ATen/native/EmbeddingBag.cpp: _embedding_bag_backward_symint, make_offset2bag, _embedding_bag_dense_backward_cpu(_sum_mean), _embedding_bag_per_sample_weights_backward_cpu_template",
        forward_scratch: None,
        backward_temporaries: Some(embedding_bag_backward_temporaries),
        approximates: Some("dense gradients in mode sum or mean (mode max's nonzero-indexed selections and the sparse backward are not drawn)"),
    },
    Override {
        op: "_fft_r2c.default",
        read_from: "torch/csrc/autograd/FunctionsManual.cpp: fft_r2c_backward (call sequence checked with torch.profiler, torch 2.11)",
        forward_scratch: None,
        backward_temporaries: Some(fft_r2c_backward_temporaries),
        approximates: Some("the gradient's consumer copies the strided real view (a leaf's AccumulateGrad does); a consumer that takes it as it is holds the complex buffer, twice the input's bytes"),
    },
    Override {
        op: "_safe_softmax.default",
        read_from: "aten/src/ATen/native/transformers/attention.cpp: _safe_softmax (the stored text compares with a -inf scalar_tensor and makes a new where; torch 2.11 calls, under torch.profiler: softmax, isneginf, all(dim, keepdim), scalar_tensor, then where's out= overload writing into the softmax)",
        // `self.isneginf()` (a bool of the input's shape), its `all` over `dim` kept (a bool
        // of the reduced shape) and a 0-dim zero of the output's dtype, beside the softmax,
        // which `where` overwrites.
        forward_scratch: Some(|c| {
            let d = c.dims("self");
            let n = c.numel("self");
            let along = if d.is_empty() {
                1
            } else {
                d[wrap(c.int("dim").unwrap_or(0), d.len())].max(1)
            };
            n + n / along + c.out_elem(0)
        }),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "_unsafe_masked_index.default",
        read_from: "aten/src/ATen/native/TensorAdvancedIndexing.cpp: _unsafe_masked_index, _unsafe_masked_index_put_accumulate (call sequence checked with torch.profiler, torch 2.11)",
        forward_scratch: Some(|c| unsafe_masked_index_scratch(c, c.out_bytes(0))),
        // `at::_unsafe_masked_index_put_accumulate(grad.new_zeros(self.sizes()), mask,
        // indices, grad)`: the zeros (self's size, dropped once the clone is made) and the
        // put's own highest point.
        backward_temporaries: Some(|c, _| {
            let self_bytes = c.bytes("self");
            Some(self_bytes + unsafe_masked_index_put_scratch(c, c.out_bytes(0)))
        }),
        approximates: None,
    },
    Override {
        op: "_unsafe_masked_index_put_accumulate.default",
        read_from: "aten/src/ATen/native/TensorAdvancedIndexing.cpp: _unsafe_masked_index_put_accumulate, _unsafe_masked_index (call sequence checked with torch.profiler, torch 2.11)",
        forward_scratch: Some(|c| unsafe_masked_index_put_scratch(c, c.bytes("values"))),
        // values: `at::_unsafe_masked_index(grad, mask, indices, 0)`; self: `grad` itself.
        backward_temporaries: Some(|c, arg| {
            Some(if arg == "values" {
                unsafe_masked_index_scratch(c, c.bytes("values"))
            } else {
                0
            })
        }),
        approximates: None,
    },
    Override {
        op: "_upsample_bilinear2d_aa.default",
        read_from: "aten/src/ATen/native/cpu/UpSampleKernel.cpp: separable_upsample_generic_Nd_kernel_impl, HelperInterpBase::_compute_index_ranges_weights; UpSample.h: area_pixel_compute_scale",
        forward_scratch: Some(|c| separable_aa_scratch(c, &["scales_h", "scales_w"], 2)),
        backward_temporaries: None,
        approximates: Some("a float input (a uint8 one takes the AVX kernel)"),
    },
    Override {
        op: "_upsample_nearest_exact1d.default",
        read_from: UPSAMPLE_CITE,
        forward_scratch: Some(|c| generic_nd_indices_weights(c, &["scales"], 1)),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "as_strided.default",
        read_from: "torch/csrc/autograd/FunctionsManual.cpp: as_strided_backward, _maybe_overlapping_memory, _min_storage_size",
        forward_scratch: None,
        backward_temporaries: Some(as_strided_backward_temporaries),
        approximates: Some("the input taken as dense at storage offset 0 (an overlapping input's `count` tensor, and a stride-0 output axis's `sum`, are not drawn)"),
    },
    Override {
        op: "as_strided_copy.default",
        read_from: "torch/csrc/autograd/FunctionsManual.cpp: as_strided_backward, _maybe_overlapping_memory, _min_storage_size",
        forward_scratch: None,
        backward_temporaries: Some(as_strided_backward_temporaries),
        approximates: Some("the input taken as dense at storage offset 0 (an overlapping input's `count` tensor, and a stride-0 output axis's `sum`, are not drawn)"),
    },
    Override {
        op: "binary_cross_entropy_with_logits.default",
        read_from: "aten/src/ATen/native/Loss.cpp: binary_cross_entropy_with_logits, apply_loss_reduction; FunctionsManual.cpp: binary_cross_entropy_with_logits_backward, binary_cross_entropy_with_logits_target_backward (call sequence checked with torch.profiler, torch 2.11)",
        // `at::log_sigmoid(input)` (log_sigmoid_forward's output and buffer, both the input's
        // size, the buffer dropped), then `(1 - target).mul_(input).sub_(log_sigmoid_input)`:
        // the loss beside log_sigmoid's result; a reduction (`loss.mean()`/`sum()`) is made
        // beside both, with mean's divisor as a 0-dim tensor (8 bytes at most). Without a
        // reduction the loss is the result.
        forward_scratch: Some(|c| {
            let n = c.bytes("self");
            if c.int("reduction") == Some(0) {
                n
            } else {
                2 * n + 8
            }
        }),
        // self: `input.sigmoid().sub_(target)`, scaled in place: the result only. target:
        // `-input` (the input's size) beside the product with grad (the result).
        backward_temporaries: Some(|c, arg| {
            Some(if arg == "target" { c.bytes("self") } else { 0 })
        }),
        approximates: Some("no pos_weight (its `(pos_weight - 1).mul(target)` and `pos_weight.mul(target)` are not drawn)"),
    },
    Override {
        op: "gather.default",
        read_from: "aten/src/ATen/native/TensorAdvancedIndexing.cpp: gather_out (an int32 index is made int64, `index.to(kLong)`: aten::to inside aten::gather under torch.profiler, torch 2.11)",
        forward_scratch: Some(int32_index_as_long),
        // `gather_backward`: `grad.new_zeros(self.sizes()).scatter_add_(dim, index, grad)`,
        // the result; scatter_add makes an int32 index int64 the same way.
        backward_temporaries: Some(|c, _| Some(int32_index_as_long(c))),
        approximates: None,
    },
    Override {
        op: "histc.default",
        read_from: "aten/src/ATen/native/Histogram.cpp: histogram_histc_out (bin_edges, `linspace` of bins + 1); cpu/HistogramKernel.cpp: histogramdd_cpu_contiguous (thread_histograms)",
        // `bin_edges` of `bins + 1` elements, and `at::zeros({num_threads, bins})` summed
        // into the result (`at::sum_out(hist, thread_histograms, 0)`).
        forward_scratch: Some(|c| {
            let (bins, e) = (c.out_numel(0), c.out_elem(0));
            (bins + 1) * e + bins * e
        }),
        backward_temporaries: None,
        approximates: Some("one intra-op thread (thread_histograms holds one histogram per thread)"),
    },
    Override {
        op: "isinf.default",
        read_from: "aten/src/ATen/native/TensorCompare.cpp: isinf; BinaryOps.cpp: eq.Scalar (wrapped_scalar_tensor)",
        // A floating input: `self.abs() == infinity`: the `abs` (the input's size) and the
        // comparison's wrapped double scalar. An integral one: `zeros_like` only.
        forward_scratch: Some(|c| {
            let e = c.elem("self");
            if c.numel("self") == 0 || e == 1 {
                return 0;
            }
            c.bytes("self") + 8
        }),
        backward_temporaries: None,
        approximates: Some("a real floating input (a complex one runs isinf on its real and imaginary views; an integral one makes no scratch but is drawn with it when 2 bytes or more)"),
    },
    Override {
        op: "masked_fill.Tensor",
        read_from: "torch/csrc/autograd/FunctionsManual.cpp: masked_fill_backward (`grad.masked_select(mask).sum()`); TensorAdvancedIndexing.cpp: masked_select_out_impl_cpu; ReduceOps.cpp: make_reduction_from_out_ty",
        forward_scratch: None,
        // value: `grad.masked_select(mask).sum()`: masked_select's int64 copy of the
        // (broadcast) mask for its count, before its result; the serial kernel (nothing
        // broadcast) makes nothing more, and the selection (at most the output's elements)
        // and its sum are smaller. The prefix-sum kernel adds two int64 buffers and the
        // selection, counted here at its largest. self: `grad.masked_fill(mask, 0)`.
        backward_temporaries: Some(|c, arg| {
            if arg != "value" {
                return Some(0);
            }
            let nb = broadcast_numel(c, "self", "mask").max(c.out_numel(0));
            let counting = nb * 8 + 8;
            let serial = c.out_numel(0) < 32768 && c.out_numel(0) == nb && c.numel("mask") == nb;
            Some(if serial {
                counting
            } else {
                counting.max(16 * nb + c.out_bytes(0))
            })
        }),
        approximates: Some("a broadcast mask's selection counted at its largest (masked_select's result is sized by the mask's values)"),
    },
    Override {
        op: "masked_select.default",
        read_from: "aten/src/ATen/native/TensorAdvancedIndexing.cpp: masked_select_out_impl_cpu; ReduceOps.cpp: make_reduction_from_out_ty; FunctionsManual.cpp: masked_select_backward",
        forward_scratch: Some(masked_select_scratch),
        // `at::zeros_like(input.expand(infer_size(input, mask)))` then `masked_scatter_`:
        // a result of the broadcast shape, summed down to the input by the engine (the
        // input-sized sum is the drawn result).
        backward_temporaries: Some(|c, _| {
            let nb = broadcast_numel(c, "self", "mask");
            Some(if nb > c.numel("self") {
                nb * c.elem("self")
            } else {
                0
            })
        }),
        approximates: Some("more than one intra-op thread (with one thread a contiguous call of 32768 elements or more also takes the serial kernel)"),
    },
    Override {
        op: "multinomial.default",
        read_from: "aten/src/ATen/native/Distributions.cpp: multinomial_out; cpu/MultinomialKernel.cpp: multinomial_with_replacement_apply",
        // Without replacement or one sample: `q = at::empty_like(self).exponential_()`, then
        // `topk_out` into `vals = at::empty(result.sizes(), self.options())` (argmax for one
        // sample). With replacement: `cum_dist = at::empty({n_categories})`.
        forward_scratch: Some(|c| {
            let n = c.int("num_samples").unwrap_or(1);
            let e = c.elem("self");
            let replacement = c.flag("replacement").unwrap_or(false);
            if !replacement || n == 1 {
                let vals = if n > 1 { c.out_numel(0) * e } else { 0 };
                c.bytes("self") + vals
            } else {
                c.dims("self").last().copied().unwrap_or(0) * e
            }
        }),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "native_dropout_backward.default",
        read_from: "aten/src/ATen/native/Dropout.cpp: native_dropout_backward; FunctionsManual.cpp: native_dropout_double_backward",
        // `grad * mask * scale`: `grad * mask` (grad's size) before the result, and the
        // scalar's wrapped double.
        forward_scratch: Some(|c| c.bytes("grad_output") + 8),
        // `ggI.type_as(grad) * (mask.type_as(grad) * scale)`: the mask made grad's dtype and
        // its scaled copy (the output's size each), alive as the product is made.
        backward_temporaries: Some(|c, _| Some(2 * c.out_bytes(0))),
        approximates: None,
    },
    Override {
        op: "scatter.src",
        read_from: "aten/src/ATen/native/TensorAdvancedIndexing.cpp: scatter_impl (an int32 index is made int64, `index.to(kLong)`: aten::to inside aten::scatter under torch.profiler, torch 2.11)",
        forward_scratch: Some(int32_index_as_long),
        // self: `grad.scatter(dim, index, 0)`; src: `grad.gather(dim, index)`: each makes an
        // int32 index int64 while it runs.
        backward_temporaries: Some(|c, _| Some(int32_index_as_long(c))),
        approximates: None,
    },
    Override {
        op: "upsample_bicubic2d.default",
        read_from: "aten/src/ATen/native/cpu/UpSampleKernel.cpp: upsample_bicubic2d_kernel_impl, upsample_generic_Nd_kernel_impl, HelperInterpCubic::compute_indices_weights",
        forward_scratch: Some(|c| generic_nd_indices_weights(c, &["scales_h", "scales_w"], 4)),
        backward_temporaries: None,
        approximates: Some("a float input (a uint8 one takes the separable kernel)"),
    },
    Override {
        op: "upsample_bilinear2d.default",
        read_from: "aten/src/ATen/native/cpu/UpSampleKernel.cpp: upsample_bilinear2d_kernel_impl_float, _use_vectorized_kernel_cond_2d, cpu_upsample_linear_channels_last, upsample_generic_Nd_kernel_impl",
        forward_scratch: Some(bilinear2d_scratch),
        backward_temporaries: None,
        approximates: Some("a contiguous float input; with one intra-op thread a 3-channel input takes the channels-last kernel at any output size (drawn only when out_h + out_w <= 128)"),
    },
    Override {
        op: "upsample_linear1d.default",
        read_from: UPSAMPLE_CITE,
        forward_scratch: Some(|c| generic_nd_indices_weights(c, &["scales"], 2)),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "upsample_nearest1d.default",
        read_from: UPSAMPLE_CITE,
        forward_scratch: Some(|c| generic_nd_indices_weights(c, &["scales"], 1)),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "upsample_trilinear3d.default",
        read_from: "aten/src/ATen/native/cpu/UpSampleKernel.cpp: upsample_trilinear3d_kernel_impl (_use_vectorized_kernel_cond_3d), upsample_generic_Nd_kernel_impl",
        // The generic kernel unless the input is channels-last-3d with more than 3 channels.
        forward_scratch: Some(|c| {
            generic_nd_indices_weights(c, &["scales_d", "scales_h", "scales_w"], 2)
        }),
        backward_temporaries: None,
        approximates: Some("a contiguous (channels-first) input"),
    },
];

#[cfg(test)]
mod tests {
    use super::super::{forward_scratch, NodeInput};
    use super::*;
    use crate::ops::generic::AtenNode;
    use crate::shape::{Dim, Shape};

    fn node(target: &str, args: serde_json::Value, shape: &[u64], dtype: &str) -> AtenNode {
        let v = serde_json::json!({"target": target, "args": args,
            "outputs": [{"shape": shape, "dtype": dtype}]});
        let mut n = AtenNode::parse(v.as_object().unwrap()).unwrap();
        n.bind(None).unwrap();
        n
    }

    fn shape(d: &[u64]) -> Shape {
        Shape(d.iter().map(|&x| Dim::fixed(x)).collect())
    }

    #[test]
    fn linear1d_holds_two_index_weight_pairs() {
        let n = node(
            "aten.upsample_linear1d.default",
            serde_json::json!([{"input": 0}, [5], true]),
            &[2, 3, 5],
            "float32",
        );
        let s = shape(&[2, 3, 4]);
        let inputs = [NodeInput {
            shape: &s,
            bytes: 96,
            requires_grad: false,
        }];
        let call = Call {
            node: &n,
            batch: 1,
            inputs: &inputs,
        };
        // Two int64 indices and two float weights of the output width.
        assert_eq!(forward_scratch(&call), 2 * 5 * (8 + 4));
    }

    #[test]
    fn masked_select_counts_the_mask_as_int64() {
        let n = node(
            "aten.masked_select.default",
            serde_json::json!([{"input": 0}, {"input": 1}]),
            &[49],
            "float32",
        );
        let (a, b) = (shape(&[10, 10]), shape(&[10, 10]));
        let inputs = [
            NodeInput {
                shape: &a,
                bytes: 400,
                requires_grad: false,
            },
            NodeInput {
                shape: &b,
                bytes: 100,
                requires_grad: false,
            },
        ];
        let call = Call {
            node: &n,
            batch: 1,
            inputs: &inputs,
        };
        // The serial kernel: only `sum`'s int64 copy of the mask and its 0-dim result,
        // before the 196-byte result exists.
        assert_eq!(forward_scratch(&call), 100 * 8 + 8 - 196);
    }
}
