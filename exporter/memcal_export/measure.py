"""Measures a torch module's training step the way `memcal-measure` does, on CPU, with the
harness's exact counting allocator (`measurement/shim/counters.cpp`, loaded with ctypes).

Protocol (`measurement/src/protocol.rs`): phases `model_load`, `inputs`, then for three steps
`forward` (the loss), `backward` (the loss dropped after it), `optimizer` (AdamW, lr 1e-4,
weight decay 0.01, then `zero_grad(set_to_none=True)`). Per phase: the allocated bytes at its
start, its peak and its end.
"""

import ctypes
import os
import subprocess
import time

STEPS = 3


def build_counter(repo, out_dir):
    """Compiles the harness's counting shim against the torch that is imported; returns its path."""
    import torch

    root = os.path.dirname(torch.__file__)
    lib = os.path.join(root, "lib")
    so = os.path.join(out_dir, "libmemcal_counters.so")
    src = os.path.join(repo, "measurement", "shim", "counters.cpp")
    if os.path.exists(so) and os.path.getmtime(so) >= os.path.getmtime(src):
        return so
    os.makedirs(out_dir, exist_ok=True)
    cmd = [
        "g++", "-shared", "-fPIC", "-O1", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-w",
        "-I" + os.path.join(root, "include"),
        "-I" + os.path.join(root, "include", "torch", "csrc", "api", "include"),
        src, "-o", so, "-L" + lib, "-lc10", "-ltorch_cpu", "-Wl,-rpath," + os.path.realpath(lib),
    ]
    subprocess.run(cmd, check=True)
    return so


class Counter:
    """The counting CPU allocator, installed in front of torch's default one."""

    def __init__(self, so_path):
        self.lib = ctypes.CDLL(so_path)
        if not self.lib.memcal_cpu_installed():
            err = ctypes.create_string_buffer(512)
            if self.lib.memcal_cpu_install(err, 512) != 0:
                raise RuntimeError("counting allocator: " + err.value.decode())

    def read(self):
        cur, peak = ctypes.c_uint64(), ctypes.c_uint64()
        self.lib.memcal_cpu_stats(ctypes.byref(cur), ctypes.byref(peak))
        return cur.value, peak.value

    def reset_peak(self):
        self.lib.memcal_cpu_reset_peak()


def run_phase(counter, base, phases, name, f):
    """Runs `f` as the phase `name`: its allocated bytes at start, its peak and its end over
    `base` (the peak reset at its start), and its wall time, appended to `phases`."""
    start, _ = counter.read()
    counter.reset_peak()
    t0 = time.perf_counter()
    f()
    wall = time.perf_counter() - t0
    end, peak = counter.read()
    phases.append({"name": name, "start": start - base, "peak": max(peak, start) - base, "end": end - base,
                   "wall_seconds": wall})


def measure(counter, build_model, make_inputs, loss_of, threads=2, seed=0):
    """Runs the protocol. `build_model()` returns the module (float32, CPU, train mode);
    `make_inputs()` a dict of tensors; `loss_of(model, inputs)` the scalar loss.
    Returns the phases as dicts with start, peak, end and wall_seconds, and the parameter count."""
    import torch

    import gc

    torch.set_num_threads(threads)
    phases = []
    state = {}
    # The harness starts in a fresh process, from zero bytes. Here an earlier run in the same
    # process may leave garbage (reference cycles of a model) or a cache alive: collected first,
    # and what stays is the baseline every figure is taken from.
    gc.collect()
    base, _ = counter.read()

    def phase(name, f):
        run_phase(counter, base, phases, name, f)

    def load():
        torch.manual_seed(seed)
        state["model"] = build_model()
        state["opt"] = torch.optim.AdamW(
            state["model"].parameters(), lr=1e-4, weight_decay=0.01, foreach=False
        )

    phase("model_load", load)
    phase("inputs", lambda: state.__setitem__("inputs", make_inputs()))
    for k in range(1, STEPS + 1):
        phase(f"step{k}.forward", lambda: state.__setitem__("loss", loss_of(state["model"], state["inputs"])))

        def backward():
            state["loss"].backward()

        phase(f"step{k}.backward", backward)
        del state["loss"]  # the harness drops the loss after the backward phase

        def step():
            state["opt"].step()
            state["opt"].zero_grad(set_to_none=True)

        phase(f"step{k}.optimizer", step)
    params = sum(p.numel() for p in state["model"].parameters())
    return phases, params
