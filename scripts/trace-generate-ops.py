"""Per-op allocation trace of one transformers model from data/models/generate.json under the
harness's counting allocator: each aten op's allocated bytes before it, its peak over them and
after it (a TorchDispatchMode around `model.generate(max_new_tokens=2)`, or with `enc` the
encoder's forward alone). What the generate rule set's single-op checks are read from.

Usage (from the repository root, after scripts/setup-pytorch.sh):
  python3 scripts/trace-generate-ops.py GRAPH BATCH PROMPT [enc]
"""
import sys, json, os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".libtorch"), os.path.join(ROOT, ".libtorch", "py"), os.path.join(ROOT, "exporter")]
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from memcal_export import measure as M, generate as G
counter = M.Counter(M.build_counter(ROOT, os.path.join(ROOT, 'target', 'counters')))
torch.set_num_threads(2)
name = sys.argv[1]; B=int(sys.argv[2]); P=int(sys.argv[3])
entries = {e['graph']: e for e in json.load(open(os.path.join(ROOT, 'data/models/generate.json')))['models']}
e = entries[name]
cfg = json.load(open(os.path.join(ROOT, "data/models", e["model"], "config.json")))
cfg.update({k:v for k,v in e['reduce'].items() if k!='attn_implementation'})
model = G.build(cfg, G.attention(e))
ids = torch.randint(100, 1000, (B,P)); mask = torch.ones(B,P,dtype=torch.long)
base,_ = counter.read()
class T(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        counter.reset_peak()
        c0,_=counter.read()
        out = func(*args, **(kwargs or {}))
        c1,pk=counter.read()
        shp = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        print(f"{str(func):45s} before {c0-base:>10} peak+{pk-c0:>9} after {c1-base:>10} d {c1-c0:>9} {shp}")
        return out
with torch.no_grad():
    with T():
        if len(sys.argv)>4 and sys.argv[4]=='enc':
            model.get_encoder()(input_ids=ids, attention_mask=mask)
        else:
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False, num_beams=1, use_cache=True, pad_token_id=0)
