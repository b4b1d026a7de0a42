"""The torch engine's start-up options: one frozen record, carried in :attr:`EngineSpec.options`.

Every field is a choice the engine resolves once, at construction, for the device it gets;
``auto`` is the engine's default there (:mod:`engines.torch_engine` says which). What was
resolved is reported in ``EngineInfo.extra``.

The ``BOOKTTS_TORCH_*`` environment variables (declared in :mod:`core.settings`) are turned
into options here and nowhere else (:meth:`TorchOptions.from_env`), for containers that configure
workers through their environment; ``run`` and ``worker`` take the same choices as flags (``--torch-compile``,
``--torch-warmup``, ``--kernels``, ``--cuda-graphs``, ``--autotune``, ``--precompile``),
which win over the environment.

This module imports neither torch nor Triton.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from core import settings
from core.errors import EngineUnavailable

SWITCH = ("auto", "on", "off")
WARMUP = ("auto", "full", "lazy")

#: The environment variable of each field. Switches: ``1`` on, ``0`` off, unset auto; warm-up:
#: ``full``, ``lazy`` or unset; anything else is an error (:class:`core.settings.SettingError`).
ENV = {
    "compile": "BOOKTTS_TORCH_COMPILE",
    "warmup": "BOOKTTS_TORCH_WARMUP",
    "fused_decoder": "BOOKTTS_TORCH_FUSED",
    "fused_flow": "BOOKTTS_TORCH_FUSED_FLOW",
    "stage_a_gemm": "BOOKTTS_TORCH_STAGE_A_GEMM",
    "cuda_graphs": "BOOKTTS_TORCH_GRAPHS",
    "autotune": "BOOKTTS_TORCH_AUTOTUNE",
    "precompile": "BOOKTTS_TORCH_PRECOMPILE",
}


@dataclass(frozen=True)
class TorchOptions:
    """How the torch engine builds itself; ``auto`` everywhere is the tuned default."""

    compile: str = "auto"
    """``torch.compile`` of stage B (Inductor kernels replayed as CUDA graphs); ``auto``: on CUDA
    unless the decoder runs through the fused kernels (eager is faster with them)."""
    warmup: str = "auto"
    """``full``: run every stage-B shape a batch of ``max_batch`` can produce at construction;
    ``lazy``: each shape on its first use; ``auto``: full when compiled, lazy when eager."""
    fused_decoder: str = "auto"
    """The decoder's resblocks and upsampling through the fused Triton kernels; ``auto``: on CUDA at
    fp16/bf16 when Triton imports and the voice fits them."""
    fused_flow: str = "auto"
    """The flow's WaveNet layers through the fused Triton kernel; ``auto``: whenever the decoder is."""
    stage_a_gemm: str = "auto"
    """Stage A's GEMMs through the Triton kernel (near-fp32 on the tensor cores) instead of cuBLAS in
    fp32; ``auto``: on CUDA when Triton imports."""
    cuda_graphs: str = "auto"
    """Stage A's chunks (and an eager stage B's) replayed as CUDA graphs; ``auto``: on CUDA."""
    autotune: str = "auto"
    """cuDNN autotuning of stage B's convolutions on each shape's first use; ``auto``: on unless the
    spec's ``workload_s`` is too short to pay for it."""
    precompile: str = "auto"
    """Compile every Triton specialization of the fused kernels in parallel at construction (rather
    than one by one in the first batch); ``auto``: on wherever a fused kernel runs on CUDA."""

    def __post_init__(self) -> None:
        for f in fields(self):
            allowed = WARMUP if f.name == "warmup" else SWITCH
            if getattr(self, f.name) not in allowed:
                raise EngineUnavailable(f"torch option {f.name}={getattr(self, f.name)!r}: choose one of "
                                        f"{', '.join(allowed)}")

    def flag(self, name: str) -> bool | None:
        """A switch as the engine reads it: True (``on``), False (``off``), None (``auto``)."""
        return {"on": True, "off": False, "auto": None}[getattr(self, name)]

    def changed(self, **values) -> "TorchOptions":
        """A copy with the given fields replaced; ``None`` values (flags not given) are left out."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    def kernels_off(self) -> "TorchOptions":
        """Every fused Triton kernel off (``--kernels off``): PyTorch and cuDNN only."""
        return replace(self, fused_decoder="off", fused_flow="off", stage_a_gemm="off", precompile="off")

    def to_dict(self) -> dict:
        """The fields that are not ``auto``."""
        return {k: v for k, v in asdict(self).items() if v != "auto"}

    def to_env(self) -> dict[str, str]:
        """The variables :meth:`from_env` reads back as these options."""
        return {ENV[k]: settings.setting(ENV[k]).encode(v) for k, v in self.to_dict().items()}

    @classmethod
    def from_dict(cls, d: dict | None) -> "TorchOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: str(v) for k, v in (d or {}).items() if k in known})

    @classmethod
    def from_env(cls, env=None) -> "TorchOptions":
        """The options that the ``BOOKTTS_TORCH_*`` variables of ``env`` (default: this process's) set."""
        return cls(**{name: settings.get(var, env) for name, var in ENV.items()})
