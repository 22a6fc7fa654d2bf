# Sourced by the GPU campaign scripts (run-cuda.sh, gpu-all.sh): puts the machine's python3 torch
# libraries, and the pip CUDA libraries beside them, on LD_LIBRARY_PATH, so that a harness built
# elsewhere with `--features cuda` runs against them. Exits 3 when python3 has no torch.
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || {
  echo "$(basename "$0"): python3 has no torch" >&2
  exit 3
}
libs="$site/torch/lib"
for d in $(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | sort); do libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
