"""Hyper-parameters of a Piper VITS voice, derived from its weights (no torch import here).

Everything that shows in weight shapes is read from them, so the medium, low and
high Piper voices load the same way. Three things do not show in shapes and are
taken from ``extra`` (read from the ONNX node attributes by :mod:`engines.tools.weights`)
or, failing that, from Piper's defaults: ``upsample_rates`` (default: half the
upsampling kernel), ``resblock_dilations`` and ``flow_dilation_rate``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class VitsHParams:
    n_vocab: int
    hidden_channels: int
    filter_channels: int
    n_heads: int
    n_layers: int
    ffn_kernel_size: int
    window_size: int
    inter_channels: int
    # stochastic duration predictor
    dp_filter_channels: int
    dp_kernel_size: int
    dp_n_layers: int
    dp_n_flows: int
    dp_num_bins: int
    dp_tail_bound: float
    # residual coupling flow
    flow_n_flows: int
    flow_hidden_channels: int
    flow_kernel_size: int
    flow_dilation_rate: int
    flow_n_layers: int
    flow_mean_only: bool
    # HiFi-GAN generator
    upsample_initial_channel: int
    upsample_rates: list = field(default_factory=list)
    upsample_kernel_sizes: list = field(default_factory=list)
    resblock: str = "2"
    resblock_kernel_sizes: list = field(default_factory=list)
    resblock_dilations: list = field(default_factory=list)
    gin_channels: int = 0

    @property
    def hop_length(self) -> int:
        n = 1
        for u in self.upsample_rates:
            n *= int(u)
        return n

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "VitsHParams":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _count(state, pattern: str) -> list[int]:
    rx = re.compile(pattern)
    return sorted({int(m.group(1)) for k in state for m in [rx.match(k)] if m})


def hparams_from_state_dict(state, extra: dict | None = None) -> VitsHParams:
    """Derive :class:`VitsHParams` from a state dict (name -> array with ``.shape``)."""
    extra = dict(extra or {})
    shape = lambda k: tuple(state[k].shape)  # noqa: E731
    n_vocab, hidden = shape("enc_p.emb.weight")
    layers = _count(state, r"enc_p\.encoder\.attn_layers\.(\d+)\.conv_q\.weight")
    rel = shape("enc_p.encoder.attn_layers.0.emb_rel_k")
    ffn = shape("enc_p.encoder.ffn_layers.0.conv_1.weight")
    inter2 = shape("enc_p.proj.weight")[0]

    dp_flows = _count(state, r"dp\.flows\.(\d+)\.pre\.weight")
    dp_proj = shape(f"dp.flows.{dp_flows[-1]}.proj.weight")[0]  # half * (3 * bins - 1), half = 1
    dp_sep = shape("dp.convs.convs_sep.0.weight")

    flows = _count(state, r"flow\.flows\.(\d+)\.pre\.weight")
    f0 = flows[0]
    post_out = shape(f"flow.flows.{f0}.post.weight")[0]
    half = shape(f"flow.flows.{f0}.pre.weight")[1]
    wn_layers = _count(state, rf"flow\.flows\.{f0}\.enc\.in_layers\.(\d+)\.weight")

    ups = _count(state, r"dec\.ups\.(\d+)\.weight")
    up_k = [shape(f"dec.ups.{i}.weight")[-1] for i in ups]
    n_res = len(_count(state, r"dec\.resblocks\.(\d+)\.")) 
    n_kernels = n_res // len(ups)
    rtype = "2" if f"dec.resblocks.0.convs.0.weight" in state else "1"
    first = "convs" if rtype == "2" else "convs1"
    res_k = [shape(f"dec.resblocks.{j}.{first}.0.weight")[-1] for j in range(n_kernels)]
    n_dil = len(_count(state, rf"dec\.resblocks\.0\.{first}\.(\d+)\.weight"))
    default_dil = [[1, 2], [2, 6], [3, 12]] if rtype == "2" else [[1, 3, 5]] * n_kernels
    dil = extra.get("resblock_dilations")
    if dil:
        dil = [list(map(int, d)) for d in dil[:n_kernels]]
    else:
        dil = [d[:n_dil] for d in default_dil[:n_kernels]]
    rates = extra.get("upsample_rates") or [k // 2 for k in up_k]
    if len(rates) != len(ups):
        raise ValueError(f"{len(rates)} upsample rates for {len(ups)} upsampling layers")
    return VitsHParams(
        n_vocab=int(n_vocab),
        hidden_channels=int(hidden),
        filter_channels=int(ffn[0]),
        n_heads=int(hidden // rel[-1]),
        n_layers=len(layers),
        ffn_kernel_size=int(ffn[-1]),
        window_size=int((rel[1] - 1) // 2),
        inter_channels=int(inter2 // 2),
        dp_filter_channels=int(dp_sep[0]),
        dp_kernel_size=int(dp_sep[-1]),
        dp_n_layers=len(_count(state, r"dp\.convs\.convs_sep\.(\d+)\.weight")),
        dp_n_flows=int((dp_flows[-1] + 1) // 2),
        dp_num_bins=int((dp_proj + 1) // 3),
        dp_tail_bound=float(extra.get("dp_tail_bound", 5.0)),
        flow_n_flows=len(flows),
        flow_hidden_channels=int(shape(f"flow.flows.{f0}.pre.weight")[0]),
        flow_kernel_size=int(shape(f"flow.flows.{f0}.enc.in_layers.0.weight")[-1]),
        flow_dilation_rate=int(extra.get("flow_dilation_rate", 1)),
        flow_n_layers=len(wn_layers),
        flow_mean_only=bool(post_out == half),
        upsample_initial_channel=int(shape("dec.conv_pre.weight")[0]),
        upsample_rates=[int(r) for r in rates],
        upsample_kernel_sizes=[int(k) for k in up_k],
        resblock=rtype,
        resblock_kernel_sizes=[int(k) for k in res_k],
        resblock_dilations=dil,
        gin_channels=0,
    )
