"""Precompiling through the real Triton compiler on a host without a GPU (for test_precompile.py).

``python tests/engines/precompile_triton_cases.py CACHE_DIR`` prints one JSON object. Triton's
active driver is replaced by a stand-in that reports an sm_90 (H100/H200) device, so Triton's
``JITFunction.warmup`` binds and specializes real (CPU) tensors and compiles for that target with
its bundled ``ptxas``, exactly as on the GPU, without ever launching. Two launches of the fused
resblock convolution (dilation 1, which Triton specializes as a constant, and 2) are precompiled:

* ``first``: the report of the first :func:`precompile` (both compiled, in the pool's threads);
* ``again``: a second one in the same process (both already in the kernel's in-memory cache:
  nothing handed to the compiler);
* ``launch_compiles``: compilations when Triton's own warm-up of the same launches runs afterwards
  (0: the launches find what was precompiled).

Run twice with the same ``CACHE_DIR``, the second process's ``first`` loads both from the disk cache.
Runs in a child process: the stand-in driver and the compiled kernels must not reach other tests.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class StandInDriver:
    """Triton's active driver, as far as binding and compiling need it: device 0, an sm_90 target."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def __getattr__(self, name):
        raise AttributeError(f"the stand-in driver has no {name}")


def main(cache_dir: str) -> None:
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset (its default)
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    import triton
    from triton.runtime.driver import driver

    from engines.torch_vits import fused_conv
    from engines.torch_vits import precompile as P

    driver.set_active(StandInDriver())
    c = 32
    w = torch.zeros(3, c, c, dtype=torch.float16)
    b = torch.zeros(c, dtype=torch.float16)

    def stage_b(z, frames):  # stands in for the engine's stage B: two resblock convolutions
        x = z.transpose(1, 2).contiguous().half()
        y = fused_conv.resconv(x, w, b, frames, 1, 1)
        fused_conv.resconv(y, w, b, frames, 1, 2, residual=x)

    shapes = [(1, 64), (2, 64), (3, 64)]
    first = P.precompile(P.enumerate_launches(stage_b, shapes, c, "cpu"), "cpu", workers=2)
    again = P.precompile(P.enumerate_launches(stage_b, shapes, c, "cpu"), "cpu", workers=2)
    compiles = []
    triton.knobs.compilation.listener = lambda **kw: compiles.append(kw.get("cache_hit"))
    launches = [kl for lists in P.enumerate_launches(stage_b, shapes[:1], c, "cpu") for kl in lists]
    kernels = [kl.warmup() for kl in launches]
    print(json.dumps({"triton": triton.__version__, "first": first.as_dict(), "again": again.as_dict(),
                      "launches": len(launches), "launch_compiles": len(compiles),
                      "launch_kernels": sorted({type(k).__name__ for k in kernels}),
                      "cubins": len(list(Path(cache_dir).rglob("*.cubin")))}))


if __name__ == "__main__":
    main(sys.argv[1])
