"""Tile choices of stage A's Triton kernels (GEMM and relative attention), per device.

One frozen record, :class:`StageATiles`, that :class:`~engines.torch_vits.fast_stage_a.FastStageA`
is built with and hands to every launch; nothing reads or patches module globals. A benchmark or
test that tries other tiles passes its own record (``model.use_fast_stage_a(..., tiles=...)``).
The decoder's and flow's kernels keep their own shape tables (:mod:`engines.torch_vits.fused_conv`,
written by ``bench/fused_conv_tune.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageATiles:
    """Tiles and product precision of stage A's kernels."""

    gemm_plain: tuple = (128, 64, 32, 4, 3)
    """GEMM without LayerNorm: ``(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)``."""
    gemm_ln: tuple = (64, 64, 32, 4, 3)
    """GEMM with the LayerNorm epilogue (a program holds the whole row as column blocks of ``BLOCK_N``)."""
    gemm_precision: str = "fp16x3"
    """The GEMM's products (:data:`engines.torch_vits.fused_gemm.SPLITS` or a ``tl.dot`` precision); the
    weights are packed for it."""
    attn_block: tuple = (64, 32, 4, 2)
    """Relative attention: ``(BLOCK_M queries, BLOCK_N keys, warps, stages)``. Do not use 8 warps with
    64-row tiles (an illegal memory access on an H200 with Triton 3.6: docs/PERFORMANCE.md)."""
    attn_precision: str = "fp16x3"
    """The attention's products: ``fp16x3``, ``tf32x3`` or ``ieee``."""

    def gemm_blocks(self) -> dict:
        """The GEMM tiles by kind of call, as :func:`engines.torch_vits.fused_gemm.gemm` takes them."""
        return {"plain": tuple(self.gemm_plain), "ln": tuple(self.gemm_ln)}


#: The tiles measured fastest on the H200 (docs/PERFORMANCE.md, "Figures behind the engine's defaults").
DEFAULT = StageATiles()

#: Per device: (a prefix of ``torch.cuda.get_device_name``, its tiles), the first match wins; a device
#: no entry names gets :data:`DEFAULT`. Add a row when another GPU measures faster with other tiles.
TABLE: tuple[tuple[str, StageATiles], ...] = (
    ("NVIDIA H200", DEFAULT),
)


def tiles_for(device) -> StageATiles:
    """The tiles for ``device`` (a ``torch.device`` or its string); CPU (Triton's interpreter) and
    unknown GPUs get :data:`DEFAULT`."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return DEFAULT
    name = torch.cuda.get_device_name(device)
    return next((t for prefix, t in TABLE if name.startswith(prefix)), DEFAULT)
