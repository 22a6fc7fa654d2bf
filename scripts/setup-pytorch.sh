#!/usr/bin/env bash
# Makes `import torch` work from the libtorch in .libtorch/ (scripts/setup-libtorch.sh installs
# it without its CUDA library wheels, which the harness does not need but Python's torch._C
# links against: they load without a GPU), and installs what the exporter's tests and the proof
# need (transformers, torchvision, numpy) into .libtorch/py. About 1.3 GB of downloads, 2.7 GB
# on disk; idempotent (a marker file per pinned set).
# Use: PYTHONPATH=.libtorch:.libtorch/py:exporter python3 ...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup-libtorch.sh"
dest="$root/.libtorch"
marker="$dest/.python-2.11.0-transformers-5.24.0-peft-0.18.0-expecttest-0.3.0"
pip() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }
# DeepSpeed for the per-rank campaign (memcal_export.ranks: zero1 impl=deepspeed, zero2,
# zero3). PyPI has only its sdist; with no op built (DS_BUILD_OPS=0, the default) the package is
# pure Python, so its `deepspeed/` folder is copied out of the sdist rather than built (building
# needs torch importable and a wheel toolchain); its Requires-Dist beside it, torch aside.
deepspeed() {
  local ds_marker="$dest/.deepspeed-0.18.2" tmp="$dest/.deepspeed-sdist"
  [ -f "$ds_marker" ] && return 0
  rm -rf "$tmp" && mkdir -p "$tmp"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    deepspeed==0.18.2 -d "$tmp"
  tar -xzf "$tmp"/deepspeed-0.18.2.tar.gz -C "$tmp"
  rm -rf "$dest/py/deepspeed"
  cp -a "$tmp/deepspeed-0.18.2/deepspeed" "$dest/py/deepspeed"
  pip --no-deps --target "$dest/py" einops==0.8.2 hjson==3.1.0 msgpack==1.2.4 py-cpuinfo==9.0.0 ninja==1.13.2
  rm -rf "$tmp"
  touch "$ds_marker"
}
if [ -f "$marker" ]; then
  deepspeed
  echo "python torch, transformers, torchvision and deepspeed already in $dest"
  exit 0
fi
# torch 2.11.0's CUDA 13.0 libraries (its wheel's Requires-Dist, cuda-toolkit 13.0.2's pins).
# pip --target skips a top-level folder that already exists (nvidia/, which holds the runtime
# and cupti setup-libtorch.sh installed), so install beside it and merge the trees.
tmp="$dest/.cuda-libs"
rm -rf "$tmp"
pip --no-deps --target "$tmp" \
  nvidia-cublas==13.1.0.3 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6 \
  nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.0.88 \
  nvidia-cuda-nvrtc==13.0.88 nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0 \
  nvidia-nccl-cu13==2.28.9 nvidia-nvshmem-cu13==3.4.5
cp -a "$tmp"/. "$dest"/
rm -rf "$tmp"
rm -rf "$dest/py"
pip --target "$dest/py" transformers==5.24.0 numpy
pip --no-deps --target "$dest/py" torchvision==0.26.0 pillow
# LoRA in the GPU campaign's dry run (memcal_export.gpu): peft and what it imports, not torch.
pip --no-deps --target "$dest/py" peft==0.18.0 accelerate==1.10.1 psutil==7.1.3
# torch's OpInfo database (torch.testing._internal, memcal_export.opcheck) imports expecttest.
pip --no-deps --target "$dest/py" expecttest==0.3.0
deepspeed
PYTHONPATH="$dest:$dest/py" python3 -c "import torch, torchvision, transformers; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
touch "$marker"
