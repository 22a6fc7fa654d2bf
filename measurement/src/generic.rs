//! The generic `aten` node (`docs/graph-format.md`, "The generic `aten` node") in tch: one ATen
//! operator call by its schema name, run through torch's dispatcher by the C++ shim
//! (`shim/aten_call.cpp`), so that autograd and autocast record it as a Python call of
//! `torch.ops.aten.<op>.<overload>` would.
//!
//! - Parameters: created once per `AtenParam::name` in the model's VarStore (under `aten/`,
//!   dots as `_`), shared by every node that names it (a layer called twice, tied weights), so
//!   the builder's `Model::built_parameters` counts each name once. Initialised uniform in
//!   ±1/√fan_in (torch's default bound for linear weights, fan_in the product of every axis but
//!   the first), made in place: no second copy while it is made, as the simulator assumes for
//!   these parameters (tch's `randn * std` holds one).
//! - Forward: the node's arguments are written in the shim's encoding (described in
//!   `shim/aten_call.cpp`): `{"input": k}` is the node's input tensor `k`, `{"param": k}` its
//!   parameter `k`, other values as they are. Arguments left out take the schema's defaults (the
//!   shim reads torch's own schema). The node's value is the op's flattened output `item` (a
//!   `Tensor[]` return counts one per element); the other outputs are released at once. The
//!   value's shape is checked against the node's `shape`. A device argument that is given
//!   (a factory's `device=`) is the run's device, whatever the traced text says.
//! - A node drawn once per return it gives (several nodes of one call) runs the op once per
//!   node, as the format counts it.

use memcal::ops::generic::{AtenNode, AtenValue};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt::Write as _;
use tch::nn::{self, Init};
use tch::{Device, Tensor};
use torch_sys::C_tensor;

extern "C" {
    fn memcal_aten_call(
        name: *const c_char,
        args: *const c_char,
        tensors: *const *const C_tensor,
        n_tensors: usize,
        device: *const c_char,
        outs: *mut *mut C_tensor,
        cap: usize,
        n_outs: *mut usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

const MSG: usize = 4096;

/// The parameters of one generic node, in its `params` order.
pub(crate) struct AtenModule {
    pub(crate) params: Vec<Tensor>,
}

/// Generic nodes' parameters by name, while a model is built.
#[derive(Default)]
pub(crate) struct SharedParams {
    by_name: HashMap<String, Tensor>,
}

impl SharedParams {
    /// The module of node `id`: its parameters, made at their first use.
    pub(crate) fn module(
        &mut self,
        root: &nn::Path,
        id: &str,
        node: &AtenNode,
    ) -> anyhow::Result<AtenModule> {
        let mut params = Vec::with_capacity(node.params.len());
        for p in &node.params {
            let dims: Vec<i64> = p.shape.iter().map(|&d| d as i64).collect();
            let t = match self.by_name.get(&p.name) {
                Some(t) => {
                    if t.size() != dims {
                        anyhow::bail!(
                            "node `{id}`: parameter `{}` is {:?} here but {:?} where it was first named",
                            p.name,
                            p.shape,
                            t.size()
                        );
                    }
                    t.shallow_clone()
                }
                None => {
                    let fan_in: i64 = if dims.len() > 1 {
                        dims[1..].iter().product()
                    } else {
                        dims.first().copied().unwrap_or(1)
                    };
                    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
                    let t = root.sub("aten").var(
                        &p.name.replace('.', "_"),
                        &dims,
                        Init::Uniform {
                            lo: -bound,
                            up: bound,
                        },
                    );
                    self.by_name.insert(p.name.clone(), t.shallow_clone());
                    t
                }
            };
            params.push(t);
        }
        Ok(AtenModule { params })
    }
}

/// Writes `v` in the shim's encoding; node input `k` is tensor `k`, parameter `k` tensor
/// `inputs + k`.
fn encode(v: &AtenValue, inputs: usize, out: &mut String) {
    match v {
        AtenValue::Input(k) => {
            let _ = write!(out, "{{\"tensor\":{k}}}");
        }
        AtenValue::Param(k) => {
            let _ = write!(out, "{{\"tensor\":{}}}", inputs + k);
        }
        AtenValue::List(l) => {
            out.push('[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                encode(x, inputs, out);
            }
            out.push(']');
        }
        AtenValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        // `{:?}` always writes a `.` or an exponent, which marks a float; the encoding's bare
        // words carry what JSON cannot.
        AtenValue::Float(f) if f.is_nan() => out.push_str("nan"),
        AtenValue::Float(f) if f.is_infinite() => {
            out.push_str(if *f > 0.0 { "inf" } else { "-inf" })
        }
        AtenValue::Float(f) => {
            let _ = write!(out, "{f:?}");
        }
        AtenValue::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        AtenValue::Str(s) => out.push_str(&json(s)),
        AtenValue::DType(s) => {
            let _ = write!(out, "{{\"dtype\":{}}}", json(s));
        }
        AtenValue::Other(s) => {
            let _ = write!(out, "{{\"other\":{}}}", json(s));
        }
        AtenValue::None => out.push_str("null"),
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The node's arguments in the shim's encoding.
pub(crate) fn encode_call(node: &AtenNode, inputs: usize) -> String {
    let mut out = String::from("{\"args\":[");
    for (i, v) in node.args.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        encode(v, inputs, &mut out);
    }
    out.push_str("],\"kwargs\":{");
    for (i, (name, v)) in node.kwargs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json(name));
        out.push(':');
        encode(v, inputs, &mut out);
    }
    out.push_str("}}");
    out
}

fn device_text(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
    }
}

/// Calls ATen overload `name` (`mul.Tensor`) with the arguments `args` (the shim's encoding) on
/// `tensors`; returns its flattened outputs (None for a return that is not a tensor, or an
/// undefined one), at most `cap` of them, and their total count.
pub fn call(
    name: &str,
    args: &str,
    tensors: &[&Tensor],
    device: Device,
    cap: usize,
) -> Result<(Vec<Option<Tensor>>, usize), String> {
    let name_c = CString::new(name).map_err(|_| format!("{name}: a NUL in the name"))?;
    let args_c = CString::new(args).map_err(|_| format!("{name}: a NUL in the arguments"))?;
    let device_c = CString::new(device_text(device)).expect("no NUL in a device");
    let ptrs: Vec<*const C_tensor> = tensors.iter().map(|t| t.as_ptr()).collect();
    let mut outs: Vec<*mut C_tensor> = vec![std::ptr::null_mut(); cap];
    let mut total = 0usize;
    let mut err = vec![0 as c_char; MSG];
    let rc = unsafe {
        memcal_aten_call(
            name_c.as_ptr(),
            args_c.as_ptr(),
            ptrs.as_ptr(),
            ptrs.len(),
            device_c.as_ptr(),
            outs.as_mut_ptr(),
            cap,
            &mut total,
            err.as_mut_ptr(),
            MSG,
        )
    };
    if rc != 0 {
        return Err(unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned());
    }
    let got = outs
        .into_iter()
        .take(total.min(cap))
        // SAFETY: each non-null entry is a new `at::Tensor*` the shim hands over.
        .map(|p| (!p.is_null()).then(|| unsafe { Tensor::from_ptr(p) }))
        .collect();
    Ok((got, total))
}

/// Runs generic node `id` on its input tensors `a` with its parameters; returns its value.
/// Panics on a torch error (the caller's phase guard records it, an out-of-memory error as such).
pub(crate) fn forward(
    id: &str,
    node: &AtenNode,
    m: &AtenModule,
    a: &[&Tensor],
    device: Device,
    batch: u64,
) -> Tensor {
    let mut tensors: Vec<&Tensor> = a.to_vec();
    tensors.extend(m.params.iter());
    let args = encode_call(node, a.len());
    let target = format!("aten.{}", node.op.name);
    let cap = node.outputs.len().max(node.item + 1);
    let (mut outs, total) = call(node.op.name, &args, &tensors, device, cap).unwrap_or_else(|e| {
        let prefix = format!("{}: ", node.op.name);
        panic!(
            "node `{id}` ({target}): {}",
            e.strip_prefix(&prefix).unwrap_or(&e)
        )
    });
    if node.item >= total {
        panic!(
            "node `{id}` ({target}): `item` is {}, but the call gave {total} output(s)",
            node.item
        );
    }
    let y = outs[node.item].take().unwrap_or_else(|| {
        panic!(
            "node `{id}` ({target}): output {} is not a tensor",
            node.item
        )
    });
    drop(outs);
    if let Some(shape) = node.bound.get(node.item) {
        let want: Vec<i64> = shape.at(batch).into_iter().map(|d| d as i64).collect();
        if y.size() != want {
            panic!(
                "node `{id}` ({target}): the output is {:?}, but the node's shape is {want:?} at batch {batch}",
                y.size()
            );
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn calls_ops_by_schema_name() {
        let x = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
        let w = Tensor::ones([3, 4], (Kind::Float, Device::Cpu));
        let (out, n) = call(
            "mm.default",
            r#"{"args":[{"tensor":0},{"tensor":1}]}"#,
            &[&x, &w],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(n, 1);
        let y = out[0].as_ref().unwrap();
        assert_eq!(y.size(), [2, 4]);
        assert_eq!(y.double_value(&[0, 0]), 3.0);

        // Defaults from the schema (alpha = 1), a keyword, a Scalar and a wrapped number.
        let (out, _) = call(
            "add.Tensor",
            r#"{"args":[{"tensor":0},2.5],"kwargs":{"alpha":2}}"#,
            &[&x],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().double_value(&[1, 2]), 6.0);

        // A Tensor[] return, flattened; only `cap` come back.
        let (out, n) = call(
            "split.Tensor",
            r#"{"args":[{"tensor":0},1,-1]}"#,
            &[&x],
            Device::Cpu,
            2,
        )
        .unwrap();
        assert_eq!((out.len(), n), (2, 3));
        assert_eq!(out[1].as_ref().unwrap().size(), [2, 1]);

        // -inf fills, bool masks, dtypes, memory formats, int[N] from one int.
        let mask = Tensor::zeros([2, 3], (Kind::Bool, Device::Cpu));
        let (out, _) = call(
            "masked_fill.Scalar",
            r#"{"args":[{"tensor":0},{"tensor":1},-inf]}"#,
            &[&x, &mask],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().double_value(&[0, 0]), 1.0);
        let (out, _) = call(
            "_to_copy.default",
            r#"{"args":[{"tensor":0}],"kwargs":{"dtype":{"dtype":"bfloat16"},"memory_format":{"other":"torch.preserve_format"}}}"#,
            &[&x],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().kind(), Kind::BFloat16);
        let (out, _) = call(
            "sum.dim_IntList",
            r#"{"args":[{"tensor":0},1,true]}"#,
            &[&x],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().size(), [2, 1]);
        let (out, _) = call(
            "arange.start",
            r#"{"args":[0,5],"kwargs":{"dtype":{"dtype":"int64"},"device":{"other":"device(type='cpu')"},"pin_memory":false}}"#,
            &[],
            Device::Cpu,
            1,
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap().size(), [5]);
    }

    #[test]
    fn converts_lists_and_optionals_by_the_schema() {
        let cpu = (Kind::Float, Device::Cpu);
        let x = Tensor::ones([2, 3], cpu);
        let one = |name: &str, args: &str, ts: &[&Tensor]| -> Tensor {
            let (mut out, _) =
                call(name, args, ts, Device::Cpu, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
            out[0].take().unwrap()
        };
        // Tensor[].
        let y = one(
            "cat.default",
            r#"{"args":[[{"tensor":0},{"tensor":0}],1]}"#,
            &[&x],
        );
        assert_eq!(y.size(), [2, 6]);
        // Tensor?[] with a None.
        let idx = Tensor::from_slice(&[2i64, 0]);
        let y = one(
            "index.Tensor",
            r#"{"args":[{"tensor":0},[null,{"tensor":1}]]}"#,
            &[&x, &idx],
        );
        assert_eq!(y.size(), [2, 2]);
        // SymInt[]? as None and float[]?.
        let img = Tensor::ones([1, 2, 4, 4], cpu);
        let y = one(
            "upsample_nearest2d.vec",
            r#"{"args":[{"tensor":0},null,[2.0,2.0]]}"#,
            &[&img],
        );
        assert_eq!(y.size(), [1, 2, 8, 8]);
        // int[2] from one int; several tensor returns, flattened.
        let (out, n) = call(
            "max_pool2d_with_indices.default",
            r#"{"args":[{"tensor":0},2,2]}"#,
            &[&img],
            Device::Cpu,
            2,
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(out[0].as_ref().unwrap().size(), [1, 2, 2, 2]);
        assert_eq!(out[1].as_ref().unwrap().kind(), Kind::Int64);
        let w = Tensor::ones([3], cpu);
        let (out, n) = call(
            "native_layer_norm.default",
            r#"{"args":[{"tensor":0},[3],{"tensor":1},null,1e-05]}"#,
            &[&x, &w],
            Device::Cpu,
            3,
        )
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(out[2].as_ref().unwrap().size(), [2, 1]);
    }

    #[test]
    fn errors_name_the_op_and_the_argument() {
        let x = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
        let err =
            |name: &str, args: &str| call(name, args, &[&x], Device::Cpu, 1).expect_err("an error");
        let e = err("mul.Tensor", r#"{"args":[{"tensor":0}]}"#);
        assert!(
            e.contains("aten::mul.Tensor") && e.contains("`other`"),
            "{e}"
        );
        let e = err("mul.Tensor", r#"{"args":[{"tensor":0},{"tensor":3}]}"#);
        assert!(e.contains("`other`") && e.contains("tensor"), "{e}");
        let e = err("sum.dim_IntList", r#"{"args":[{"tensor":0},"x"]}"#);
        assert!(e.contains("argument `dim[0]`"), "{e}");
        let e = err(
            "mul.Tensor",
            r#"{"args":[{"tensor":0},1],"kwargs":{"beta":1}}"#,
        );
        assert!(e.contains("no argument `beta`"), "{e}");
        let e = err("no_such_op.default", r#"{"args":[]}"#);
        assert!(e.contains("no ATen operator aten::no_such_op"), "{e}");
        let e = err("relu.default", r#"{"args":[{"tensor":0}"#);
        assert!(e.contains("argument encoding"), "{e}");
        // A torch error inside the kernel comes back as text, not a crash.
        let e = err("mm.default", r#"{"args":[{"tensor":0},{"tensor":0}]}"#);
        assert!(
            e.contains("mm.default") && e.contains("shapes cannot be multiplied"),
            "{e}"
        );
    }

    #[test]
    fn floats_and_strings_encode_as_the_shim_reads_them() {
        let mut s = String::new();
        for v in [
            AtenValue::Float(1.0),
            AtenValue::Float(1e-5),
            AtenValue::Float(f64::NEG_INFINITY),
            AtenValue::Str("a\"b".into()),
            AtenValue::List(vec![AtenValue::Param(1), AtenValue::None]),
        ] {
            encode(&v, 2, &mut s);
            s.push(' ');
        }
        assert_eq!(s, r#"1.0 1e-5 -inf "a\"b" [{"tensor":3},null] "#);
    }
}
