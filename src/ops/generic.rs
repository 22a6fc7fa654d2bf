//! The generic `aten` node: one ATen operator call as torch.export records it (its target,
//! arguments, output shape and dtype), for every op the exporter does not draw as a composite.
//! Its facts come from torch's own tables ([`super::aten`]); nothing per op is written here.
//! Format: `docs/graph-format.md`, "The generic `aten` node".

use super::aten::{self, ArgType, AtenOp};
use crate::shape::{Dim, Shape};
use serde::Serialize;
use serde_json::{Map, Value};

/// One argument value of a generic node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AtenValue {
    /// The node's input `k` (a graph value).
    Input(usize),
    /// The node's parameter `k` (`params[k]`).
    Param(usize),
    /// A list (a tensor list, an int list, ...).
    List(Vec<AtenValue>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// A dtype named by torch (`float32`).
    DType(String),
    /// Another object (a memory format, a layout, a device), as torch prints it.
    Other(String),
    None,
}

impl AtenValue {
    fn parse(v: &Value, field: &str) -> Result<AtenValue, String> {
        Ok(match v {
            Value::Null => AtenValue::None,
            Value::Bool(b) => AtenValue::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) if !n.is_f64() => AtenValue::Int(i),
                _ => AtenValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => AtenValue::Str(s.clone()),
            Value::Array(a) => AtenValue::List(
                a.iter()
                    .map(|x| AtenValue::parse(x, field))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(o) if o.len() == 1 => {
                let (k, x) = o.iter().next().expect("one entry");
                let index = || {
                    x.as_u64().map(|i| i as usize).ok_or_else(|| {
                        format!("attribute `{field}`: `{k}` must be an index, found {x}")
                    })
                };
                let text = || {
                    x.as_str().map(str::to_string).ok_or_else(|| {
                        format!("attribute `{field}`: `{k}` must be a string, found {x}")
                    })
                };
                match k.as_str() {
                    "input" => AtenValue::Input(index()?),
                    "param" => AtenValue::Param(index()?),
                    "dtype" => AtenValue::DType(text()?),
                    "other" => AtenValue::Other(text()?),
                    _ => {
                        return Err(format!(
                            "attribute `{field}`: unknown value {{\"{k}\": ...}}; a value object is {{\"input\": k}}, {{\"param\": k}}, {{\"dtype\": name}} or {{\"other\": text}}"
                        ))
                    }
                }
            }
            Value::Object(_) => {
                return Err(format!(
                    "attribute `{field}`: a value object has exactly one key, found {v}"
                ))
            }
        })
    }

    /// Every node input and parameter this value names, in order.
    fn tensors(&self, out: &mut Vec<TensorRef>) {
        match self {
            AtenValue::Input(k) => out.push(TensorRef::Input(*k)),
            AtenValue::Param(k) => out.push(TensorRef::Param(*k)),
            AtenValue::List(l) => l.iter().for_each(|x| x.tensors(out)),
            _ => {}
        }
    }
}

/// A tensor a generic node reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRef {
    Input(usize),
    Param(usize),
}

/// A trainable parameter a generic node reads (torch.export's parameter placeholders). Two
/// nodes naming one parameter share it: it is counted and trained once (a layer called twice,
/// tied embeddings).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtenParam {
    /// The module's name for it (`encoder.layer.0.attention.query.weight`).
    pub name: String,
    pub shape: Vec<u64>,
}

/// Element types a generic node's values may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemType {
    Float32,
    Float16,
    Bfloat16,
    Float64,
    Int64,
    Int32,
    Int8,
    Uint8,
    Bool,
    Int16,
    Uint16,
    Uint32,
    Uint64,
    /// `torch.complex32` (`chalf`): two float16s.
    Complex32,
    /// `torch.complex64` (`cfloat`): two float32s.
    Complex64,
    /// `torch.complex128` (`cdouble`): two float64s.
    Complex128,
}

impl ElemType {
    pub fn parse(s: &str) -> Option<ElemType> {
        Some(match s {
            "float32" => ElemType::Float32,
            "float16" => ElemType::Float16,
            "bfloat16" => ElemType::Bfloat16,
            "float64" => ElemType::Float64,
            "int64" => ElemType::Int64,
            "int32" => ElemType::Int32,
            "int8" => ElemType::Int8,
            "uint8" => ElemType::Uint8,
            "bool" => ElemType::Bool,
            "int16" => ElemType::Int16,
            "uint16" => ElemType::Uint16,
            "uint32" => ElemType::Uint32,
            "uint64" => ElemType::Uint64,
            "complex32" => ElemType::Complex32,
            "complex64" => ElemType::Complex64,
            "complex128" => ElemType::Complex128,
            _ => return None,
        })
    }

    pub fn bytes(self) -> u64 {
        match self {
            ElemType::Complex128 => 16,
            ElemType::Float64 | ElemType::Int64 | ElemType::Uint64 | ElemType::Complex64 => 8,
            ElemType::Float32 | ElemType::Int32 | ElemType::Uint32 | ElemType::Complex32 => 4,
            ElemType::Float16 | ElemType::Bfloat16 | ElemType::Int16 | ElemType::Uint16 => 2,
            ElemType::Int8 | ElemType::Uint8 | ElemType::Bool => 1,
        }
    }

    /// Whether a value of this type can carry a gradient.
    pub fn is_floating(self) -> bool {
        matches!(
            self,
            ElemType::Float32
                | ElemType::Float16
                | ElemType::Bfloat16
                | ElemType::Float64
                | ElemType::Complex32
                | ElemType::Complex64
                | ElemType::Complex128
        )
    }
}

/// One output of a generic node's op: its shape (expressions of `B` and `T`) and dtype.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtenOutput {
    pub shape: Vec<ShapeExpr>,
    pub dtype: ElemType,
    /// Whether torch made it contiguous (the traced strides) [true].
    pub contiguous: bool,
}

/// One entry of a generic shape: a size, `B`, `T` or an expression of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ShapeExpr {
    Size(u64),
    Expr(String),
}

/// A generic ATen node.
#[derive(Debug, Clone, Serialize)]
pub struct AtenNode {
    /// torch's table entry of the target (`aten.mul.Tensor`).
    #[serde(serialize_with = "target_name")]
    pub op: &'static AtenOp,
    pub args: Vec<AtenValue>,
    pub kwargs: Vec<(String, AtenValue)>,
    pub params: Vec<AtenParam>,
    /// Every tensor return of the op (one, unless it returns several).
    pub outputs: Vec<AtenOutput>,
    /// Which of `outputs` is this node's value.
    pub item: usize,
    /// The module path the call was made in (`encoder.layer.0.attention`), for strategies.
    pub module: Option<String>,
    /// The output shapes with `T` bound (set by [`AtenNode::bind`]).
    #[serde(skip)]
    pub bound: Vec<Shape>,
}

fn target_name<S: serde::Serializer>(op: &&'static AtenOp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("aten.{}", op.name))
}

impl PartialEq for AtenNode {
    fn eq(&self, o: &AtenNode) -> bool {
        std::ptr::eq(self.op, o.op)
            && self.args == o.args
            && self.kwargs == o.kwargs
            && self.params == o.params
            && self.outputs == o.outputs
            && self.item == o.item
            && self.module == o.module
    }
}

fn shape_of(v: &Value, field: &str) -> Result<Vec<ShapeExpr>, String> {
    let a = v
        .as_array()
        .ok_or_else(|| format!("attribute `{field}` must be a list of sizes, \"B\", \"T\" or expressions of them, found {v}"))?;
    a.iter()
        .map(|x| match x {
            Value::Number(n) => n
                .as_u64()
                .map(ShapeExpr::Size)
                .ok_or_else(|| format!("attribute `{field}`: {x} is not a size")),
            Value::String(s) => {
                eval(s, 1, Some(1)).map_err(|m| format!("attribute `{field}`: {m}"))?;
                Ok(ShapeExpr::Expr(s.clone()))
            }
            _ => Err(format!(
                "attribute `{field}`: {x} is not a size or an expression"
            )),
        })
        .collect()
}

fn flag_of(v: Option<&Value>, field: &str) -> Result<bool, String> {
    match v {
        None => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(x) => Err(format!(
            "attribute `{field}` must be true or false, found {x}"
        )),
    }
}

fn dtype_of(v: Option<&Value>, field: &str) -> Result<ElemType, String> {
    match v {
        None => Ok(ElemType::Float32),
        Some(Value::String(s)) => ElemType::parse(s).ok_or_else(|| {
            format!("attribute `{field}`: unknown dtype `{s}` (float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool)")
        }),
        Some(x) => Err(format!("attribute `{field}` must be a dtype name, found {x}")),
    }
}

impl AtenNode {
    /// Parses the attributes of an `aten` node (every key is read here; an unknown one is an
    /// error).
    pub fn parse(map: &Map<String, Value>) -> Result<AtenNode, String> {
        const KEYS: &[&str] = &[
            "target",
            "args",
            "kwargs",
            "params",
            "shape",
            "dtype",
            "contiguous",
            "outputs",
            "item",
            "module",
        ];
        if let Some(k) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown attribute `{k}` (an aten node takes {})",
                KEYS.join(", ")
            ));
        }
        let target = map
            .get("target")
            .and_then(Value::as_str)
            .ok_or("missing attribute `target` (an ATen overload, `aten.mul.Tensor`)")?;
        let op = aten::lookup(target).ok_or_else(|| {
            format!("attribute `target`: `{target}` is not an ATen overload of torch 2.11's native_functions.yaml (write `aten.<op>.<overload>`, `.default` for none)")
        })?;
        let args = match map.get("args") {
            None => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| AtenValue::parse(x, "args"))
                .collect::<Result<_, _>>()?,
            Some(x) => return Err(format!("attribute `args` must be a list, found {x}")),
        };
        let kwargs = match map.get("kwargs") {
            None => vec![],
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, x)| Ok((k.clone(), AtenValue::parse(x, "kwargs")?)))
                .collect::<Result<_, String>>()?,
            Some(x) => return Err(format!("attribute `kwargs` must be an object, found {x}")),
        };
        let params = parse_params(map.get("params"))?;
        let outputs = parse_outputs(map)?;
        let item = match map.get("item") {
            None => 0,
            Some(x) => x
                .as_u64()
                .ok_or_else(|| format!("attribute `item` must be an index, found {x}"))?
                as usize,
        };
        if item >= outputs.len() {
            return Err(format!(
                "attribute `item` is {item}, but the node has {} output(s)",
                outputs.len()
            ));
        }
        let module = match map.get("module") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(x) => return Err(format!("attribute `module` must be a string, found {x}")),
        };
        let node = AtenNode {
            op,
            args,
            kwargs,
            params,
            outputs,
            item,
            module,
            bound: vec![],
        };
        node.check_args()?;
        Ok(node)
    }

    /// The tensors the node reads, in argument order (positional, then keyword).
    pub fn tensor_refs(&self) -> Vec<TensorRef> {
        let mut out = Vec::new();
        for v in self.args.iter().chain(self.kwargs.iter().map(|(_, v)| v)) {
            v.tensors(&mut out);
        }
        out
    }

    /// The schema argument index of the tensor a [`TensorRef`] is passed as, if it is passed
    /// as a whole argument (not inside a list).
    pub fn arg_of(&self, t: TensorRef) -> Option<usize> {
        let is = |v: &AtenValue| match (v, t) {
            (AtenValue::Input(a), TensorRef::Input(b)) => *a == b,
            (AtenValue::Param(a), TensorRef::Param(b)) => *a == b,
            _ => false,
        };
        if let Some(k) = self.args.iter().position(is) {
            return Some(k);
        }
        let (name, _) = self.kwargs.iter().find(|(_, v)| is(v))?;
        self.op.args.iter().position(|a| a.name == name)
    }

    /// The value passed as schema argument `k` (positional or by keyword).
    pub fn arg(&self, k: usize) -> Option<&AtenValue> {
        self.args.get(k).or_else(|| {
            let name = self.op.args.get(k)?.name;
            self.kwargs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
        })
    }

    fn check_args(&self) -> Result<(), String> {
        let schema = self.op.args;
        let positional = schema.iter().filter(|a| !a.kwarg_only).count();
        if self.args.len() > positional {
            return Err(format!(
                "attribute `args` has {} values; aten.{} takes {positional} positional arguments",
                self.args.len(),
                self.op.name
            ));
        }
        for (name, _) in &self.kwargs {
            if !schema.iter().any(|a| a.name == name) {
                return Err(format!(
                    "attribute `kwargs`: aten.{} has no argument `{name}`",
                    self.op.name
                ));
            }
        }
        for (k, a) in schema.iter().enumerate() {
            let given = self.arg(k);
            if given.is_none() && !a.has_default && !matches!(a.ty, ArgType::OptionalTensor) {
                return Err(format!(
                    "attribute `args`: aten.{} needs its argument `{}`",
                    self.op.name, a.name
                ));
            }
            if let Some(v) = given {
                let tensorish = matches!(v, AtenValue::Input(_) | AtenValue::Param(_));
                if tensorish && !a.ty.is_tensor() {
                    return Err(format!(
                        "attribute `args`: argument `{}` of aten.{} is not a tensor, but a tensor is passed",
                        a.name, self.op.name
                    ));
                }
            }
        }
        for t in self.tensor_refs() {
            if let TensorRef::Param(p) = t {
                if p >= self.params.len() {
                    return Err(format!(
                        "attribute `args`: {{\"param\": {p}}}, but the node has {} params",
                        self.params.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Binds `T` to `seq` in every output shape (a graph without a sequence axis binds none: an
    /// expression naming `T` is then an error).
    pub fn bind(&mut self, seq: Option<u64>) -> Result<(), String> {
        self.bound = self
            .outputs
            .iter()
            .enumerate()
            .map(|(o, out)| {
                let field = if self.outputs.len() == 1 {
                    "shape".to_string()
                } else {
                    format!("outputs[{o}].shape")
                };
                out.shape
                    .iter()
                    .map(|e| match e {
                        ShapeExpr::Size(n) => Ok(Dim::fixed(*n)),
                        ShapeExpr::Expr(s) => {
                            let t = seq.ok_or_else(|| {
                                format!("attribute `{field}`: `{s}` needs the sequence axis T, which the graph's inputs do not have")
                            });
                            eval(s, 0, if s.contains('T') { Some(t?) } else { None })
                                .map_err(|m| format!("attribute `{field}`: {m}"))
                        }
                    })
                    .collect::<Result<Vec<Dim>, String>>()
                    .map(Shape)
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    /// The node's value's shape (after [`AtenNode::bind`]).
    pub fn shape(&self) -> &Shape {
        &self.bound[self.item]
    }

    /// Whether the node's value is a view of (or the same tensor as) one of its arguments
    /// (the schema's alias annotation on its return).
    pub fn output_is_view(&self) -> bool {
        let k = self.item.min(self.op.returns.len().saturating_sub(1));
        self.op
            .returns
            .get(k)
            .is_some_and(|r| r.alias != aten::Alias::None)
    }

    /// Whether autograd never gives this node's value a gradient, whatever its inputs: an op
    /// torch's tables call not differentiable (derivatives.yaml, or torchgen's
    /// `DONT_REQUIRE_DERIVATIVE`: `new_ones`, `zeros_like`, `argmax`...), or a value that is not
    /// floating point (`set_history` skips it).
    pub fn never_requires_grad(&self) -> bool {
        matches!(self.op.autograd, aten::AtenAutograd::NonDifferentiable)
            || !self
                .outputs
                .get(self.item)
                .is_some_and(|o| o.dtype.is_floating())
    }

    /// What the generic rule approximates for this node, in words (None: nothing): an op
    /// whose gradient torch's tables do not give, or a formula whose temporaries are hidden
    /// in a helper.
    pub fn approximation(&self) -> Option<String> {
        use aten::{AtenAutograd, Temporaries};
        let floating = self.outputs.iter().any(|o| o.dtype.is_floating());
        match &self.op.autograd {
            _ if self.op.composite => Some(format!(
                "aten.{}: a composite op drawn whole (eager autograd runs its decomposition); what the decomposition saves is not drawn",
                self.op.name
            )),
            AtenAutograd::Missing if floating && !self.output_is_view() => Some(format!(
                "aten.{}: no derivatives.yaml entry; drawn with no gradient and nothing saved",
                self.op.name
            )),
            AtenAutograd::NotImplemented if floating => Some(format!(
                "aten.{}: derivatives.yaml says not_implemented; drawn with no gradient",
                self.op.name
            )),
            AtenAutograd::Formulas { grads, .. } => {
                grads.iter().find_map(|g| match g.temporaries {
                    Temporaries::Opaque(h) => Some(format!(
                    "aten.{}: its gradient formula calls `{h}`, whose temporaries are not counted",
                    self.op.name
                )),
                    Temporaries::Counted(_) => None,
                })
            }
            _ => None,
        }
    }

    /// Elements of every parameter it owns.
    pub fn parameter_tensors(&self) -> Vec<Vec<u64>> {
        self.params.iter().map(|p| p.shape.clone()).collect()
    }
}

fn parse_params(v: Option<&Value>) -> Result<Vec<AtenParam>, String> {
    let Some(v) = v else { return Ok(vec![]) };
    let a = v
        .as_array()
        .ok_or_else(|| format!("attribute `params` must be a list, found {v}"))?;
    a.iter()
        .enumerate()
        .map(|(i, p)| {
            let name = p.get("name").and_then(Value::as_str).ok_or_else(|| {
                format!("attribute `params[{i}]`: missing `name` (the module's parameter name)")
            })?;
            let shape = p
                .get("shape")
                .and_then(Value::as_array)
                .and_then(|s| s.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| {
                    format!("attribute `params[{i}]`: `shape` must be a list of sizes")
                })?;
            Ok(AtenParam {
                name: name.to_string(),
                shape,
            })
        })
        .collect()
}

fn parse_outputs(map: &Map<String, Value>) -> Result<Vec<AtenOutput>, String> {
    match (map.get("outputs"), map.get("shape")) {
        (Some(_), Some(_)) => Err(
            "give `shape` and `dtype` for one output, or `outputs` for several, not both".into(),
        ),
        (None, None) => Err("missing attribute `shape` (the output's shape)".into()),
        (None, Some(s)) => Ok(vec![AtenOutput {
            shape: shape_of(s, "shape")?,
            dtype: dtype_of(map.get("dtype"), "dtype")?,
            contiguous: flag_of(map.get("contiguous"), "contiguous")?,
        }]),
        (Some(Value::Array(a)), None) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let shape = o
                    .get("shape")
                    .ok_or_else(|| format!("attribute `outputs[{i}]`: missing `shape`"))?;
                Ok(AtenOutput {
                    shape: shape_of(shape, &format!("outputs[{i}].shape"))?,
                    dtype: dtype_of(o.get("dtype"), &format!("outputs[{i}].dtype"))?,
                    contiguous: flag_of(o.get("contiguous"), &format!("outputs[{i}].contiguous"))?,
                })
            })
            .collect(),
        (Some(x), None) => Err(format!(
            "attribute `outputs` must be a non-empty list of {{shape, dtype}}, found {x}"
        )),
    }
}

/// A polynomial in `B` (coefficients by power) while an expression is evaluated.
type Poly = Vec<i128>;

/// Evaluates a shape expression of `B` and `T` (`+ - * //`, parentheses, integers) to one
/// dimension `coef x B^pow`. `b` is unused but for checking (`0`: symbolic). `t`: the bound
/// sequence length (None: `T` is an error).
fn eval(s: &str, _b: u64, t: Option<u64>) -> Result<Dim, String> {
    let tokens = tokenize(s)?;
    let mut p = Parser {
        t: &tokens,
        k: 0,
        seq: t,
    };
    let v = p.sum().map_err(|m| {
        format!("`{s}`: {m} (an expression of B and T with + - * // and parentheses)")
    })?;
    if p.k != tokens.len() {
        return Err(format!("`{s}` is not an expression of B and T"));
    }
    let terms: Vec<(usize, i128)> = v
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, c)| *c != 0)
        .collect();
    match terms.as_slice() {
        [] => Ok(Dim::fixed(0)),
        [(pow, c)] if *c > 0 => Ok(Dim {
            coef: *c as u64,
            pow: *pow as u32,
        }),
        _ => Err(format!(
            "`{s}` is not a size times a power of B (memcal's shapes are c x B^k); at this T it is {}",
            show(&v)
        )),
    }
}

fn show(p: &Poly) -> String {
    let mut parts = vec![];
    for (k, c) in p.iter().enumerate().rev().filter(|(_, c)| **c != 0) {
        parts.push(match k {
            0 => format!("{c}"),
            1 => format!("{c}B"),
            _ => format!("{c}B^{k}"),
        });
    }
    parts.join(" + ")
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i128),
    B,
    T,
    Op(char),
    FloorDiv,
}

fn tokenize(s: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = vec![];
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            ' ' => {}
            'B' => out.push(Tok::B),
            'T' => out.push(Tok::T),
            '+' | '-' | '*' | '(' | ')' => out.push(Tok::Op(c[i])),
            '/' if c.get(i + 1) == Some(&'/') => {
                out.push(Tok::FloorDiv);
                i += 1;
            }
            d if d.is_ascii_digit() => {
                let mut n: i128 = 0;
                while i < c.len() && c[i].is_ascii_digit() {
                    n = n
                        .saturating_mul(10)
                        .saturating_add(c[i] as i128 - '0' as i128);
                    i += 1;
                }
                out.push(Tok::Num(n));
                continue;
            }
            x => {
                return Err(format!(
                "`{s}`: unexpected `{x}` (an expression of B and T with + - * // and parentheses)"
            ))
            }
        }
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    t: &'a [Tok],
    k: usize,
    seq: Option<u64>,
}

impl Parser<'_> {
    fn sum(&mut self) -> Result<Poly, String> {
        let mut v = self.product()?;
        while let Some(Tok::Op(c @ ('+' | '-'))) = self.t.get(self.k) {
            self.k += 1;
            let r = self.product()?;
            v = add(&v, &r, if *c == '+' { 1 } else { -1 });
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<Poly, String> {
        let mut v = self.atom()?;
        loop {
            match self.t.get(self.k) {
                Some(Tok::Op('*')) => {
                    self.k += 1;
                    let r = self.atom()?;
                    v = mul(&v, &r);
                }
                Some(Tok::FloorDiv) => {
                    self.k += 1;
                    let r = self.atom()?;
                    v = div(&v, &r)?;
                }
                _ => return Ok(v),
            }
        }
    }

    fn atom(&mut self) -> Result<Poly, String> {
        let tok = self.t.get(self.k).cloned();
        self.k += 1;
        match tok {
            Some(Tok::Num(n)) => Ok(vec![n]),
            Some(Tok::B) => Ok(vec![0, 1]),
            Some(Tok::T) => Ok(vec![self.seq.unwrap_or(1) as i128]),
            Some(Tok::Op('-')) => Ok(self.atom()?.iter().map(|c| -c).collect()),
            Some(Tok::Op('(')) => {
                let v = self.sum()?;
                match self.t.get(self.k) {
                    Some(Tok::Op(')')) => {
                        self.k += 1;
                        Ok(v)
                    }
                    _ => Err("a `(` is not closed".into()),
                }
            }
            _ => Err("an expression is cut short".into()),
        }
    }
}

fn add(a: &Poly, b: &Poly, sign: i128) -> Poly {
    let mut v = vec![0; a.len().max(b.len())];
    for (i, c) in a.iter().enumerate() {
        v[i] += c;
    }
    for (i, c) in b.iter().enumerate() {
        v[i] += sign * c;
    }
    v
}

fn mul(a: &Poly, b: &Poly) -> Poly {
    let mut v = vec![0i128; a.len() + b.len()];
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            v[i + j] = v[i + j].saturating_add(x.saturating_mul(*y));
        }
    }
    v
}

/// Floor division by a constant (or a polynomial that is one monomial dividing every term).
fn div(a: &Poly, b: &Poly) -> Result<Poly, String> {
    let nz: Vec<(usize, i128)> = b
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, c)| *c != 0)
        .collect();
    let [(pow, c)] = nz.as_slice() else {
        return Err("`//` by a sum is not supported".into());
    };
    let mut v = vec![0; a.len()];
    for (i, x) in a.iter().enumerate() {
        if *x == 0 {
            continue;
        }
        if i < *pow {
            return Err("`//` by a power of B that does not divide".into());
        }
        if i > 0 && x % c != 0 {
            return Err(format!("`//` of a multiple of B by {c} is not exact"));
        }
        v[i - pow] += x.div_euclid(*c);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_evaluate_to_one_dimension() {
        assert_eq!(eval("B", 0, None), Ok(Dim::batch()));
        assert_eq!(eval("B*T", 0, Some(128)), Ok(Dim { coef: 128, pow: 1 }));
        assert_eq!(eval("(T - 1)//2 + 1", 0, Some(9)), Ok(Dim::fixed(5)));
        assert_eq!(eval("4*B*B", 0, None), Ok(Dim { coef: 4, pow: 2 }));
        assert!(eval("B + 1", 0, None).is_err());
        assert!(eval("B // 3", 0, None).is_err());
        assert!(eval("B x", 0, None).is_err());
        assert!(eval("(B", 0, None).is_err());
    }
}
