#!/usr/bin/env bash
# Benchmark (issue 36, "Performance"): exports two 7B-class decoders on the meta device with the
# exporter (transformers' Gemma 3 text class at Llama-2-7B's sizes: 32 layers, d 4096, 32 heads,
# ff 11008, vocab 32000, its attention and norms drawn op by op; CodeGen at CodeGen-6B's shape,
# with generic `aten` nodes), then plans each graph with the release binary. Prints the export's seconds, the graph's nodes, and `memcal
# plan`'s seconds and peak resident memory. Targets: export <= 60 s, plan <= 2 s and <= 1 GB.
#
#   scripts/setup-pytorch.sh && cargo build --release && scripts/bench-export-7b.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/bench-export}"
mkdir -p "$out"
export PYTHONPATH="$root/.libtorch:$root/.libtorch/py:$root/exporter"
for model in gemma3 codegen; do
python3 - "$model" "$out/$model-7b.json" <<'PY'
import sys, time, warnings
import torch, transformers
from memcal_export import export, write
warnings.simplefilter("ignore")
if sys.argv[1] == "gemma3":
    cls = transformers.Gemma3ForCausalLM
    cfg = transformers.Gemma3TextConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                        num_key_value_heads=32, head_dim=128, intermediate_size=11008,
                                        vocab_size=32000, max_position_embeddings=4096)
else:  # CodeGen-6B's shape: strided rotary slices, drawn with generic aten nodes
    cls = transformers.CodeGenForCausalLM
    cfg = transformers.CodeGenConfig(n_layer=33, n_embd=4096, n_head=16, rotary_dim=64, n_positions=2048,
                                     vocab_size=51200)
t0 = time.perf_counter()
with torch.device("meta"):
    m = cls(cfg)
g = export(m, [("input_ids", ["B", 2048], ("int64", cfg.vocab_size))], name=sys.argv[1] + "-7b", family="bench")
seconds = time.perf_counter() - t0
write(g, sys.argv[2])
generic = sum(1 for n in g["nodes"] if n["op"] == "aten")
print(f"{sys.argv[1]}: export {seconds:.1f} s (target <= 60 s), {len(g['nodes'])} nodes ({generic} generic aten), "
      f"{sum(p.numel() for p in m.parameters()):,} parameters")
PY
done
cd "$root"  # memcal plan reads data/ (the verdict's evidence) as a user's checkout does
bin="$root/target/release/memcal"
[ -x "$bin" ] || { echo "bench-export-7b: build the release binary first (cargo build --release)" >&2; exit 2; }
for model in gemma3 codegen; do
  /usr/bin/time -f "$model: plan %e s (target <= 2 s), peak resident %M KB (target <= 1,048,576 KB)" \
    "$bin" plan "$out/$model-7b.json" --batch 1 --json > "$out/$model-plan.json"
done
