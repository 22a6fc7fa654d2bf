"""python -m memcal_export: draw a module as a memcal graph.

  python -m memcal_export torchvision.models:resnet50 --kwargs '{"num_classes": 1000}' \
      --input images=B,3,224,224 --name resnet50-tv --family resnet --out resnet50-tv.json
  memcal plan resnet50-tv.json --batch 32

The factory (`package.module:callable`) is called under `torch.device("meta")`: no weights are
allocated, so a 70 B model exports in seconds (a module whose construction reads tensor values,
such as torchvision's RegNet, is built with only its parameters and buffers on meta). Inputs: `name=dims` with `B` for the batch axis;
`name=dims:int64:CLASSES` for token ids. The loss is added: cross_entropy over the output's
last axis (labels `[B, ...]`, classes = that axis unless --classes) or --loss mse. Exit 2 with
the node and what to do when something has no memcal op.

A transformers model from its config.json (no weights are downloaded; torch.export traces it):

  python -m memcal_export --hf-config config.json --input input_ids=B,1024:int64:50257 \
      --name gpt2 --family gpt2 --out gpt2.json

builds the config's `architectures[0]` class (or --hf-class) on the meta device. BertModel-style
encoders end in their pooled output: use --loss mse.
"""

import argparse
import importlib
import json
import sys

from .trace import ExportError, build_on_meta, export, write


def _input(spec):
    name, _, rest = spec.partition("=")
    parts = rest.split(":")
    dims = ["B" if d == "B" else int(d) for d in parts[0].split(",")]
    if len(parts) == 1:
        return (name, dims, "float32")
    if parts[1] != "int64" or len(parts) != 3:
        raise ValueError(f"input `{spec}`: write name=dims or name=dims:int64:CLASSES")
    return (name, dims, ("int64", int(parts[2])))


def _factory(args):
    if not args.factory:
        raise ValueError("give a factory (package.module:callable) or --hf-config CONFIG.json")
    mod_name, _, attr = args.factory.partition(":")
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _hf_model(args):
    import transformers

    with open(args.hf_config) as f:
        raw = json.load(f)
    if "model_type" not in raw:
        raise ValueError(f"{args.hf_config}: no `model_type` field; is this a transformers config.json?")
    config = transformers.AutoConfig.for_model(**raw)
    cls_name = args.hf_class or (raw.get("architectures") or [None])[0]
    if not cls_name:
        raise ValueError(f"{args.hf_config}: no `architectures` field; name the class with --hf-class (e.g. LlamaForCausalLM)")
    return getattr(transformers, cls_name)(config)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m memcal_export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("factory", nargs="?", help="package.module:callable (or :Class.method) that returns the nn.Module")
    ap.add_argument("--hf-config", help="a transformers config.json: build its model instead of calling a factory")
    ap.add_argument("--hf-class", help="the transformers class to build from --hf-config (default: its architectures[0])")
    ap.add_argument("--tracer", default="auto", choices=["auto", "fx", "export"],
                    help="torch.fx, torch.export, or auto: export for transformers models, fx otherwise")
    ap.add_argument("--output", help="the field of the forward's result the loss reads (default: the tensor, logits or pooler_output)")
    ap.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the factory")
    ap.add_argument("--input", action="append", required=True, help="name=B,3,224,224 or name=B,512:int64:50257")
    ap.add_argument("--name", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse"])
    ap.add_argument("--classes", type=int)
    ap.add_argument("--out", help="write here (default: standard output)")
    args = ap.parse_args(argv)
    import torch

    try:
        inputs = [_input(s) for s in args.input]
        if args.hf_config:
            with torch.device("meta"):
                module = _hf_model(args)
        else:
            make, kwargs = _factory(args), json.loads(args.kwargs)
            module = build_on_meta(lambda: make(**kwargs))
        graph = export(module, inputs, name=args.name, family=args.family, loss=args.loss, classes=args.classes,
                       tracer=args.tracer, output=args.output)
    except (ExportError, ValueError, AttributeError, ImportError, OSError, KeyError) as e:
        print(f"memcal_export: {e}", file=sys.stderr)
        return 2
    if args.out:
        write(graph, args.out)
        print(f"wrote {args.out}: {len(graph['nodes'])} nodes; plan it with `memcal plan {args.out} --batch N`", file=sys.stderr)
    else:
        json.dump(graph, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
