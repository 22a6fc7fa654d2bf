//! The activation a config names (`activation_function`, `hidden_act`), as transformers runs
//! it (`transformers/activations.py`, `ACT2FN`): a fused torch op, or the Python expression
//! the class writes, op by op in Python's evaluation order (left operand first, a temporary
//! freed once its last use has run), so that the graph's autograd keeps what the real one
//! keeps. The zoo builders draw the fused `gelu`; [`apply`] rewrites those nodes.

use crate::graph::{GraphFile, NodeFile};
use serde_json::{json, Map, Value};

/// One step of a written-out activation: its id suffix, op, inputs (`x` is the activation's
/// input, other names are earlier steps) and attributes.
type Step = (&'static str, &'static str, &'static [&'static str], Value);

/// How `act` is drawn: `None` for the fused exact `gelu` the builders already draw, else the
/// steps replacing it (the last one takes the node's id); an error text for an activation
/// transformers has that this does not know.
fn steps(act: &str) -> Result<Option<Vec<Step>>, String> {
    let s = |f: &str, v: f64| json!({"fn": f, "scalar": v});
    Ok(Some(match act {
        // GELUActivation: nn.functional.gelu.
        "gelu" => return Ok(None),
        // PytorchGELUTanh: nn.functional.gelu(input, approximate="tanh").
        "gelu_pytorch_tanh" => vec![("", "gelu", &[], json!({"approximate": "tanh"}))],
        // NewGELUActivation: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x +
        // 0.044715 * torch.pow(x, 3.0)))).
        "gelu_new" => vec![
            ("half", "unary", &["x"], s("mul_scalar", 0.5)),
            ("cube", "unary", &["x"], json!({"fn": "pow", "exponent": 3.0})),
            ("cube_scaled", "unary", &["cube"], s("mul_scalar", 0.044715)),
            ("inner", "add", &["x", "cube_scaled"], Value::Null),
            (
                "inner_scaled",
                "unary",
                &["inner"],
                s("mul_scalar", (2.0 / std::f64::consts::PI).sqrt()),
            ),
            ("tanh", "unary", &["inner_scaled"], json!({"fn": "tanh"})),
            ("one_plus", "unary", &["tanh"], s("add_scalar", 1.0)),
            ("", "mul", &["half", "one_plus"], Value::Null),
        ],
        // FastGELUActivation: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715
        // * x * x))).
        "gelu_fast" => vec![
            ("half", "unary", &["x"], s("mul_scalar", 0.5)),
            ("x_scaled", "unary", &["x"], s("mul_scalar", 0.7978845608)),
            ("x_c", "unary", &["x"], s("mul_scalar", 0.044715)),
            ("x_c_x", "mul", &["x_c", "x"], Value::Null),
            ("one_plus_sq", "unary", &["x_c_x"], s("add_scalar", 1.0)),
            ("inner", "mul", &["x_scaled", "one_plus_sq"], Value::Null),
            ("tanh", "unary", &["inner"], json!({"fn": "tanh"})),
            ("one_plus", "unary", &["tanh"], s("add_scalar", 1.0)),
            ("", "mul", &["half", "one_plus"], Value::Null),
        ],
        // QuickGELUActivation: x * torch.sigmoid(1.702 * x).
        "quick_gelu" => vec![
            ("scaled", "unary", &["x"], s("mul_scalar", 1.702)),
            ("sigmoid", "unary", &["scaled"], json!({"fn": "sigmoid"})),
            ("", "mul", &["x", "sigmoid"], Value::Null),
        ],
        "relu" => vec![("", "relu", &[], Value::Null)],
        "silu" | "swish" => vec![("", "silu", &[], Value::Null)],
        "tanh" => vec![("", "tanh", &[], Value::Null)],
        "sigmoid" => vec![("", "unary", &[], json!({"fn": "sigmoid"}))],
        other => {
            return Err(format!(
                "activation `{other}` is not one memcal draws (known: gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, quick_gelu, relu, silu, swish, tanh, sigmoid)"
            ))
        }
    }))
}

/// Rewrites every `gelu` node of `graph` as `act`, and says how it is drawn; an error text
/// for an unknown activation.
pub(super) fn apply(graph: &mut GraphFile, act: &str) -> Result<String, String> {
    let Some(steps) = steps(act)? else {
        return Ok(format!(
            "`{act}` as the fused `gelu` op (nn.functional.gelu)"
        ));
    };
    let said = match steps.as_slice() {
        [(_, op, _, attrs)] => format!(
            "`{act}` as the `{op}` op{}",
            if attrs.is_null() {
                String::new()
            } else {
                format!(" {attrs}")
            }
        ),
        _ => format!(
            "`{act}` written out as transformers' Python writes it, {} ops ({})",
            steps.len(),
            steps
                .iter()
                .map(|s| match s.3.get("fn") {
                    Some(Value::String(f)) => f.clone(),
                    _ => s.1.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut nodes = Vec::with_capacity(graph.nodes.len() * steps.len());
    for node in std::mem::take(&mut graph.nodes) {
        if node.op != "gelu" {
            nodes.push(node);
            continue;
        }
        let name = |step: &str| match step {
            "" => node.id.clone(),
            "x" => node.inputs[0].clone(),
            s => format!("{}.{s}", node.id),
        };
        for (suffix, op, inputs, attributes) in &steps {
            nodes.push(NodeFile {
                id: name(suffix),
                op: op.to_string(),
                inputs: if inputs.is_empty() {
                    node.inputs.clone()
                } else {
                    inputs.iter().map(|i| name(i)).collect()
                },
                attributes: match attributes {
                    Value::Object(m) => m.clone(),
                    _ => Map::new(),
                },
            });
        }
    }
    graph.nodes = nodes;
    Ok(said)
}
