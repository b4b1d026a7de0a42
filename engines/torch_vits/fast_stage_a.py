"""Stage A (text encoder + stochastic duration predictor) in a channels-last ``[B, T, C]`` layout.

The same function as :meth:`VitsSynthesizer.stage_a <engines.torch_vits.model.VitsSynthesizer.stage_a>`
with the same weights, in true float32, written for few GPU kernels: activations stay
``[B, T, C]`` (flat ``[B*T, C]`` for the GEMMs), so layer norms need no transposes and the
1x1 convolutions are single ``addmm`` calls against weight matrices packed once by
:class:`FastStageA` (the model's parameters are untouched: the state dict loads as before).

What changes against the channel-first path, and why the result is the same up to float
rounding (sums taken in another order):

* **Attention.** ``q``, ``k``, ``v`` come from one GEMM against the concatenated weights
  (``1/sqrt(d)`` folded into ``W_q``, ``b_q``), laid out ``[3, H, B, T, d]`` by one copy, so
  each is a contiguous ``[H*B, T, d]`` batch. The logits live in a buffer ``S`` of shape
  ``[H*B, T, T + 2w]`` whose column ``w + j`` is key ``j``; the ``w`` columns on each side
  are padding. Then query ``i``'s key ``i + r - w`` (offset ``r`` in ``0..2w``) is column
  ``i + r``, so the band of relative offsets is the strided view ``S[b].as_strided((T, 2w+1),
  (T + 2w + 1, 1))``: the relative-key logits are added there by one in-place GEMM
  (``q @ E_k^T``), with no index tensors and no gather. ``S`` starts as a copy of an additive
  mask made once per forward: 0 for real keys, -1e4 for padding keys and padding columns.
  ``exp`` of those is exactly 0 in float32 (the old path's ``masked_fill`` to -1e4 gives the
  same 0s), so after the softmax the padding columns hold exact zeros and the band view of the
  probabilities *is* ``p`` re-indexed by relative offset (keys out of range read a 0): the
  relative-value term is one more in-place GEMM (``p_band @ E_v``).
* **FFN** (kernel ``k``, ``C -> F -> C``). Inputs are written masked into a zero-padded buffer
  ``[B, T + k - 1, C]`` made once per forward. The first convolution is im2col (the ``k``
  shifted rows are one strided view, copied to ``[B*T, k*C]``) and one GEMM with bias and
  ReLU; the second is one GEMM of the padded buffer against the ``k`` taps side by side
  (``[F, k*C]``, output ``k*C`` wide instead of an im2col ``k*F`` wide) whose ``k`` shifted
  column blocks are summed through one strided view.
* **DDSConv.** The residual stream lives, masked, in the middle of a zero-padded buffer
  ``[B, T + 2*pad, C]`` (``pad`` = the largest dilation); the depthwise convolution is ``k``
  multiply-adds of shifted views of it, the 1x1 convolution an ``addmm``, GELU exact (erf),
  and the residual update ``x += y * mask`` is done in place (for real positions ``y * 1``
  is ``y``: the same sum as the old unmasked update).
* **Masks.** Values at padding positions never reach real positions here (convolution
  inputs are masked, padding keys get probability exactly 0), so masks whose only effect is
  on padding positions are dropped; every tensor that leaves (``m_p``, ``logs_p``,
  durations) is masked as before. Padding values stay finite.
* The duration flows run on the two noise channels as two ``[B, T]`` tensors (a flip is a
  swap); only the channel that is returned goes through the final affine flow. The spline is
  :func:`spline_inverse`: :func:`~engines.torch_vits.modules.rq_spline_inverse`'s arithmetic
  value for value (bit-identical on CPU), in a third of its kernels, fed the projection's
  ``[B, T, 3*bins - 1]`` output directly (``1/sqrt(filter_channels)`` folded into the projection).

All arithmetic is float32. On CUDA, :meth:`FastStageA.__call__` turns TF32 matmuls off for
its duration if they were on (durations are the ``ceil`` of the predictor's output, so
stage A must not depend on them).

With ``kernels=True`` (the engine's default on CUDA, ``$BOOKTTS_TORCH_STAGE_A_GEMM``) every GEMM
but the attention's runs through :func:`engines.torch_vits.fused_gemm.gemm`: on the tensor cores
as three float16 products of split operands (about 22 significant bits, near float32; see that
module), with the residual, LayerNorm, activation and mask in its epilogue, and each DDSConv
layer's depthwise convolution, LayerNorm and GELU, and each flow's spline, run as one kernel each
(:mod:`engines.torch_vits.fused_dds`); so does each encoder layer's attention
(:mod:`engines.torch_vits.fused_attn`: an online softmax, no ``S`` buffer; its products as three
TF32 products of split operands, also about 22 bits; ``fused_attention``). The encoder's stream
then lives, masked, in the FFN's padded input buffer (:meth:`FastStageA._encoder_tc`); padding
rows hold zeros instead of unmasked values, which never reach a real position either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engines.torch_vits.fused_attn import relative_attention
from engines.torch_vits.fused_dds import sepconv_ln_gelu
from engines.torch_vits.fused_dds import spline_inverse as fused_spline_inverse
from engines.torch_vits.fused_gemm import gemm, pack
from engines.torch_vits.tiles import StageATiles, tiles_for

#: additive logit of a padding key (as the channel-first path's masked_fill): exp() gives exactly 0
NEG = -1e4


def _mat(conv) -> torch.Tensor:
    """A 1x1 ``Conv1d``'s weight as a contiguous ``[out, in]`` matrix."""
    return conv.weight.detach()[:, :, 0].contiguous()


def _addmm_relu(bias, a, w_t):
    """``relu(bias + a @ w_t)``; one cuBLASLt call with a fused bias+ReLU epilogue where torch has it."""
    f = getattr(torch, "_addmm_activation", None)
    if f is not None:
        return f(bias, a, w_t, use_gelu=False)
    return torch.relu(torch.addmm(bias, a, w_t))


def spline_constants(tail_bound: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The small constant tensors :func:`spline_inverse` uses (made once, on the device)."""
    tb = float(tail_bound)
    ends = torch.tensor([[-tb, tb], [-tb, tb], [1.0, 1.0]], dtype=dtype, device=device)
    return ends, torch.tensor([-1, 0], device=device)


def spline_inverse(x, st, nb: int, tail_bound: float, min_w: float = 1e-3, min_h: float = 1e-3,
                   min_d: float = 1e-3, consts=None):
    """:func:`~engines.torch_vits.modules.rq_spline_inverse` of ``x`` ``[B, T]`` with the unnormalized
    widths, heights and inner derivatives side by side in ``st`` ``[B, T, 3*nb - 1]``: the same
    arithmetic per value, in fewer kernels. Widths and heights are normalized together (one
    softmax, one cumsum over ``[B, T, 2, nb]``); the knots and the padded derivatives are
    written into one ``[B, T, 3, nb + 1]`` tensor whose exact end values (``-B``, ``B``, ``1``)
    are set by one copy; each input's bin is counted against the first ``nb`` height knots
    (the old last edge, ``B + 1e-6``, is above every clamped input or, rounded to ``B``, only
    counts when all others do: the old clamp to ``nb - 1`` gives the same bin); and one gather
    picks the knot at the bin's start and end of all three rows (widths, heights and the
    ratio are differences and a quotient of those two, as before). ``consts``: from
    :func:`spline_constants` (made here when None)."""
    b, t = x.shape
    k = nb
    if min_w != min_h:  # pragma: no cover - VITS uses one minimum for both
        raise ValueError("widths and heights are normalized together; they need the same minimum")
    tb = tail_bound
    ends, offs = consts if consts is not None else spline_constants(tb, x.device, x.dtype)
    inside = (x >= -tb) & (x <= tb)
    xc = x.clamp(-tb, tb)
    size = torch.softmax(st[..., :2 * k].unflatten(-1, (2, k)), dim=-1)  # [b, t, 2, k]
    size = min_w + (1 - min_w * k) * size
    # the running sum along the bins: scanned over a non-innermost dimension (the bins moved
    # there by one small copy), which CUDA does sequentially per row; CUDA's innermost-dimension
    # scan of 10 bins is far slower (docs/PERFORMANCE.md, "Figures behind the engine's defaults")
    cum = torch.cumsum(size.transpose(-1, -2).contiguous(), dim=-2).transpose(-1, -2)
    knots = torch.empty(b, t, 3, k + 1, device=x.device, dtype=x.dtype)  # rows: width knots, height knots, d
    knots[..., ::k] = ends
    torch.sub(2 * tb * cum[..., :k - 1], tb, out=knots[..., :2, 1:k])
    torch.add(F.softplus(st[..., 2 * k:]), min_d, out=knots[..., 2, 1:k])
    cnt = (xc[..., None] >= knots[..., 1, :k]).sum(dim=-1, keepdim=True)  # bin + 1, in 1..k
    pick = (cnt + offs).clamp_(0, k)  # [b, t, 2]: knots at the bin's ends
    g = torch.gather(knots, -1, pick[:, :, None, :].expand(b, t, 3, 2))  # [b, t, 3, 2]
    wh = g[..., :2, 1] - g[..., :2, 0]
    in_w, in_h = wh[..., 0], wh[..., 1]
    in_cumw, in_cumh = g[..., 0, 0], g[..., 1, 0]
    d0, d1 = g[..., 2, 0], g[..., 2, 1]
    delta = in_h / in_w

    y = xc - in_cumh
    s = d0 + d1 - 2 * delta
    ys = y * s
    a = ys + in_h * (delta - d0)
    bb = in_h * d0 - ys
    c = -delta * y
    disc = bb * bb - 4 * a * c
    root = (2 * c) / (-bb - torch.sqrt(disc))
    out = root * in_w + in_cumw
    return torch.where(inside, out, x)


@dataclass
class _Dds:
    taps: list  # per layer: [k] tensors [C] (depthwise weights per tap)
    sep_b: list
    c1_w: list  # [C, C]
    c1_b: list
    n1: list  # (gamma, beta, eps)
    n2: list
    dil: list
    k: int
    c1_kn: list | None = None  # [C, C] transposed, for the kernel path
    taps_kc: list | None = None  # per layer: [k, C] (the taps stacked), for the kernel path


class FastStageA:
    """Packed weights of a :class:`~engines.torch_vits.model.VitsSynthesizer`'s stage A and its
    channels-last forward. Make it after the model's last device/dtype move (the model's
    ``use_fast_stage_a`` does, and re-packs on later moves and weight loads)."""

    def __init__(self, model, kernels: bool = False, tiles: StageATiles | None = None):
        hp = model.hp
        #: GEMMs through :func:`engines.torch_vits.fused_gemm.gemm` (tensor cores, near fp32, fused epilogues),
        #: each encoder layer's attention through :mod:`engines.torch_vits.fused_attn`'s one kernel, and each
        #: DDSConv layer's prologue and each flow's spline through :mod:`engines.torch_vits.fused_dds`
        self.kernels = bool(kernels)
        enc = model.enc_p
        self.device = enc.emb.weight.device
        #: the kernels' tiles and precision (default: :func:`engines.torch_vits.tiles.tiles_for` the device)
        self.tiles = tiles or tiles_for(self.device)
        self._blocks = self.tiles.gemm_blocks()
        self.dtype = enc.emb.weight.dtype
        self.C = hp.hidden_channels
        self.H = hp.n_heads
        self.d = self.C // self.H
        self.w = hp.window_size
        self.emb = enc.emb.weight.detach()
        self.emb_scale = math.sqrt(enc.hidden_channels)
        self.ffn_k = hp.ffn_kernel_size
        self.F = hp.filter_channels
        self.out_channels = enc.out_channels
        scale = 1.0 / math.sqrt(self.d)
        self.layers = []
        e = enc.encoder
        for attn, n1, ffn, n2 in zip(e.attn_layers, e.norm_layers_1, e.ffn_layers, e.norm_layers_2):
            k = ffn.conv_1.kernel_size[0]
            w1 = ffn.conv_1.weight.detach()  # [F, C, k]
            w2 = ffn.conv_2.weight.detach()  # [C, F, k]
            b2 = ffn.conv_2.bias.detach()
            self.layers.append(dict(
                # q, k, v in one [3C, C] matrix; 1/sqrt(d) folded into q's rows
                qkv_w=torch.cat([_mat(attn.conv_q) * scale, _mat(attn.conv_k), _mat(attn.conv_v)]).contiguous(),
                qkv_b=torch.cat([attn.conv_q.bias.detach() * scale, attn.conv_k.bias.detach(),
                                 attn.conv_v.bias.detach()]).contiguous(),
                ek_t=attn.emb_rel_k.detach()[0].t().contiguous(),  # [d, 2w+1]
                ev=attn.emb_rel_v.detach()[0].contiguous(),  # [2w+1, d]
                o_w=_mat(attn.conv_o), o_b=attn.conv_o.bias.detach(),
                n1=(n1.gamma.detach(), n1.beta.detach(), n1.eps),
                # conv_1 as im2col: column j*C + c of the input row is x[t + j - k//2, c]
                f1_w=w1.permute(0, 2, 1).reshape(w1.shape[0], -1).contiguous(),  # [F, k*C]
                f1_b=ffn.conv_1.bias.detach(),
                # conv_2's taps side by side: output column j*C + c is tap j of channel c
                f2_w=w2.permute(2, 0, 1).reshape(-1, w2.shape[1]).contiguous(),  # [k*C, F]
                f2_b=torch.cat([b2, b2.new_zeros((k - 1) * b2.shape[0])]),  # the bias once, on tap 0's block
                n2=(n2.gamma.detach(), n2.beta.detach(), n2.eps),
            ))
        proj = enc.proj
        self.proj_w = _mat(proj)  # [2*out, C]
        self.proj_b = proj.bias.detach()[None, :, None]

        dp = model.dp
        self.dp_pre_w, self.dp_pre_b = _mat(dp.pre), dp.pre.bias.detach()
        self.dp_dds = self._pack_dds(dp.convs)
        self.dp_proj_w, self.dp_proj_b = _mat(dp.proj), dp.proj.bias.detach()
        # the flows in inference order, as StochasticDurationPredictor.reverse runs them
        order = list(reversed(dp.flows))
        order = order[:-2] + [order[-1]]
        self.plan = []
        for flow in order:
            name = type(flow).__name__
            if name == "Flip":
                self.plan.append(("flip", None))
            elif name == "ConvFlow":
                nb = flow.num_bins
                s = 1.0 / math.sqrt(flow.filter_channels)
                pw, pb = _mat(flow.proj), flow.proj.bias.detach()
                pw = torch.cat([pw[:2 * nb] * s, pw[2 * nb:]]).contiguous()  # widths and heights / sqrt(fc)
                pb = torch.cat([pb[:2 * nb] * s, pb[2 * nb:]]).contiguous()
                self.plan.append(("conv", dict(pre_w=flow.pre.weight.detach()[:, 0, 0].contiguous(),
                                                pre_b=flow.pre.bias.detach(), dds=self._pack_dds(flow.convs),
                                                proj_w=pw, proj_b=pb, nb=nb, tail=flow.tail_bound,
                                                consts=spline_constants(flow.tail_bound, self.device, self.dtype))))
            elif name == "ElementwiseAffine":
                self.plan.append(("affine", dict(m=flow.m.detach()[:, 0], scale=torch.exp(-flow.logs.detach())[:, 0])))
            else:  # pragma: no cover - the module list is built by StochasticDurationPredictor
                raise TypeError(f"no fast path for duration flow {name}")
        if self.plan[-1][0] != "affine":  # pragma: no cover
            raise TypeError("the duration flows do not end with the affine flow")
        if self.kernels:
            self._pack_kn(model)
        self.dds_pad = max(max(d * (self.dp_dds.k // 2) for d in self.dp_dds.dil),
                           *(max(d * (p["dds"].k // 2) for d in p["dds"].dil) for op, p in self.plan if op == "conv"))
        self.dp_channels = self.dp_pre_w.shape[0]

    @staticmethod
    def _pack_dds(dds) -> _Dds:
        k = dds.convs_sep[0].kernel_size[0]
        return _Dds(
            taps=[[c.weight.detach()[:, 0, j].contiguous() for j in range(k)] for c in dds.convs_sep],
            sep_b=[c.bias.detach() for c in dds.convs_sep],
            c1_w=[_mat(c) for c in dds.convs_1x1], c1_b=[c.bias.detach() for c in dds.convs_1x1],
            n1=[(n.gamma.detach(), n.beta.detach(), n.eps) for n in dds.norms_1],
            n2=[(n.gamma.detach(), n.beta.detach(), n.eps) for n in dds.norms_2],
            dil=[c.dilation[0] for c in dds.convs_sep], k=k)

    def _pack_kn(self, model) -> None:
        """The ``[K, N]`` weight matrices :func:`~engines.torch_vits.fused_gemm.gemm` reads (the
        kernel path's copies of the matrices above)."""
        prec = self.tiles.gemm_precision

        def kn(m):
            return pack(m.t(), prec)

        for L, ffn in zip(self.layers, model.enc_p.encoder.ffn_layers):
            w2 = ffn.conv_2.weight.detach()  # [C, F, k]
            L.update(qkv_kn=kn(L["qkv_w"]), o_kn=kn(L["o_w"]), f1_kn=kn(L["f1_w"]),
                     # conv_2 as im2col over the padded hidden buffer: row j*F + f is tap j of channel f
                     f2_kn=pack(w2.permute(2, 1, 0).reshape(-1, w2.shape[0]), prec),
                     f2_b1=ffn.conv_2.bias.detach())
        self.proj_kn, self.proj_b1 = kn(self.proj_w), self.proj_b.flatten()
        self.dp_pre_kn, self.dp_proj_kn = kn(self.dp_pre_w), kn(self.dp_proj_w)
        for pk in [self.dp_dds] + [p["dds"] for op, p in self.plan if op == "conv"]:
            pk.c1_kn = [kn(w) for w in pk.c1_w]
            pk.taps_kc = [torch.stack(taps).contiguous() for taps in pk.taps]
        for op, p in self.plan:
            if op == "conv":
                p["proj_kn"] = kn(p["proj_w"])

    def _gemm(self, *args, **kw):
        """:func:`~engines.torch_vits.fused_gemm.gemm` with this stage A's tiles."""
        return gemm(*args, blocks=self._blocks, **kw)

    @property
    def precision(self) -> str | None:
        """The GEMM kernel's precision the weights were packed for (None without the kernel)."""
        return self.proj_kn.precision if self.kernels else None

    # ------------------------------------------------------------------ forward
    def __call__(self, ids, lengths, dp_noise, length_scale):
        if ids.device != self.device:
            raise RuntimeError(f"stage A's packed weights are on {self.device}, the input on {ids.device}; "
                               "call use_fast_stage_a() after moving the model")
        if ids.is_cuda and not torch.compiler.is_compiling() and torch.backends.cuda.matmul.allow_tf32:
            torch.backends.cuda.matmul.allow_tf32 = False  # true fp32: durations are ceil() of the output
            try:
                return self.forward(ids, lengths, dp_noise, length_scale)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = True
        return self.forward(ids, lengths, dp_noise, length_scale)

    def forward(self, ids, lengths, dp_noise, length_scale):
        b, t = ids.shape
        dt = dp_noise.dtype
        pos = torch.arange(t, device=ids.device)
        mask = (pos[None, :] < lengths[:, None]).to(dt)  # [b, t]
        m3 = mask[:, :, None]  # [b, t, 1]
        x = self.encode(ids, lengths, m3)
        m_p, logs_p = self._prior(x, mask, lengths)
        logw = self._durations(x, mask, m3, dp_noise, lengths)
        if torch.is_tensor(length_scale) and length_scale.dim() == 1:  # one per row
            length_scale = length_scale[:, None]
        w = torch.exp(logw) * mask * length_scale
        durations = torch.ceil(w)
        frames = torch.clamp_min(durations.sum(dim=1), 1).long()
        return m_p, logs_p, durations, frames

    # ------------------------------------------------------------------ text encoder
    def encode(self, ids, lengths, m3):
        """The text encoder's output ``[b, t, C]`` (before the prior projection); padding rows are
        0 on the kernel path and unmasked on the other (neither reaches a real position)."""
        return self._encoder_tc(ids, lengths, m3) if self.kernels else self._encoder(ids, lengths, m3)

    def _key_bias(self, lengths, t: int, dtype):
        """The additive key mask ``[H, b, t, t + 2w]`` (a broadcast view) over the padded logit
        columns (column ``w + j`` is key ``j``): 0 for real keys, :data:`NEG` for padding."""
        w = self.w
        key = torch.arange(-w, t + w, device=lengths.device)
        kbias = torch.where((key[None, :] >= 0) & (key[None, :] < lengths[:, None]), 0.0, NEG).to(dtype)
        return kbias[None, :, None, :].expand(self.H, lengths.shape[0], t, t + 2 * w)

    def _attend(self, L, q, kk, v, kbias, out):
        """The windowed relative attention of one layer (see the module docstring) for ``q``, ``kk``,
        ``v`` ``[H*b, t, d]``, written into ``out`` ``[H*b, t, d]`` and returned."""
        h, b, t, wide = kbias.shape
        hb, d, w = h * b, self.d, self.w
        band = ((t * wide, wide + 1, 1), (hb, t, 2 * w + 1))  # strides, size of the relative-offset band
        s = torch.empty(h, b, t, wide, device=q.device, dtype=q.dtype)
        s.copy_(kbias)
        s = s.view(hb, t, wide)
        s.as_strided(band[1], band[0]).baddbmm_(q, L["ek_t"].expand(hb, d, 2 * w + 1))
        s[:, :, w:w + t].baddbmm_(q, kk.transpose(1, 2))
        pr = torch.softmax(s, dim=-1)
        torch.bmm(pr[:, :, w:w + t], v, out=out)
        return out.baddbmm_(pr.as_strided(band[1], band[0]), L["ev"].expand(hb, 2 * w + 1, d))

    def _encoder(self, ids, lengths, m3):
        b, t = ids.shape
        c, h, d, fch = self.C, self.H, self.d, self.F
        hb = h * b
        x = (F.embedding(ids, self.emb) * self.emb_scale).view(b * t, c)
        kbias = self._key_bias(lengths, t, x.dtype)
        p = self.ffn_k // 2
        buf1 = x.new_zeros(b, t + 2 * p, c)  # FFN inputs, masked, between zero rows
        buf2 = x.new_zeros(b, t + 2 * p, fch)
        mid1, mid2 = buf1[:, p:p + t], buf2[:, p:p + t]
        k = self.ffn_k
        cols = buf1.as_strided((b, t, k * c), ((t + 2 * p) * c, c, 1))  # row t: x[t - p .. t + p]
        for L in self.layers:
            # ---- attention
            qkv = torch.addmm(L["qkv_b"], x, L["qkv_w"].t())  # [b*t, 3c]
            qkv = qkv.view(b, t, 3 * h, d).permute(2, 0, 1, 3).contiguous().view(3, hb, t, d)
            o = self._attend(L, qkv[0], qkv[1], qkv[2], kbias, x.new_empty(hb, t, d))
            o = o.view(h, b, t, d).permute(1, 2, 0, 3).reshape(b * t, c)
            y = torch.addmm(L["o_b"], o, L["o_w"].t())
            g, be, eps = L["n1"]
            x = F.layer_norm(x + y, (c,), g, be, eps)
            # ---- FFN
            torch.mul(x.view(b, t, c), m3, out=mid1)
            hid = _addmm_relu(L["f1_b"], cols.reshape(b * t, k * c), L["f1_w"].t())  # [b*t, F]
            torch.mul(hid.view(b, t, fch), m3, out=mid2)
            taps = torch.addmm(L["f2_b"], buf2.view(-1, fch), L["f2_w"].t())  # [b*(t+2p), k*c]
            y = taps.as_strided((b, t, k, c), ((t + 2 * p) * k * c, k * c, (k + 1) * c, 1)).sum(dim=2)
            g, be, eps = L["n2"]
            x = F.layer_norm(x + y.view(b * t, c), (c,), g, be, eps)
        return x.view(b, t, c)

    def _encoder_tc(self, ids, lengths, m3):
        """:meth:`_encoder` through :func:`~engines.torch_vits.fused_gemm.gemm`: the stream lives, masked,
        in the middle rows of the FFN's padded input buffer; q/k/v are written split by head and
        the attention output read merged by head (no copies); the output projection and the FFN's
        second convolution (im2col over the padded hidden buffer) add the residual and normalize in
        their epilogue; the FFN's first convolution applies ReLU and the mask. The attention is
        :func:`~engines.torch_vits.fused_attn.relative_attention`'s one kernel; the tiles are
        :attr:`tiles`'."""
        b, t = ids.shape
        c, h, d, fch, k = self.C, self.H, self.d, self.F, self.ffn_k
        hb = h * b
        p = k // 2
        buf1 = ids.new_zeros((b, t + 2 * p, c), dtype=self.dtype)  # the stream, masked, between zero rows
        buf2 = ids.new_zeros((b, t + 2 * p, fch), dtype=self.dtype)  # the FFN's hidden layer, likewise
        x, hid = buf1[:, p:p + t], buf2[:, p:p + t]
        torch.mul(F.embedding(ids, self.emb), m3 * self.emb_scale, out=x)
        cols1 = buf1.as_strided((b, t, k * c), ((t + 2 * p) * c, c, 1))  # row t: x[t - p .. t + p]
        cols2 = buf2.as_strided((b, t, k * fch), ((t + 2 * p) * fch, fch, 1))
        gemm = self._gemm
        tiles = self.tiles
        qkv = x.new_empty(3 * h, b, t, d)
        o = x.new_empty(hb, t, d)
        for L in self.layers:
            gemm(x, L["qkv_kn"], L["qkv_b"], qkv)
            q, kk, v = (qkv[i * h:(i + 1) * h].view(hb, t, d) for i in range(3))  # row n: head n // b, item n % b
            relative_attention(q, kk, v, L["ek_t"], L["ev"], lengths, self.w, o, block=tiles.attn_block,
                               precision=tiles.attn_precision)
            gemm(o.view(h, b, t, d), L["o_kn"], L["o_b"], x, residual=x, ln=L["n1"], lengths=lengths)
            gemm(cols1, L["f1_kn"], L["f1_b"], hid, act="relu", lengths=lengths)
            gemm(cols2, L["f2_kn"], L["f2_b1"], x, residual=x, ln=L["n2"], lengths=lengths)
        return x

    def _prior(self, x, mask, lengths):
        """``m_p``, ``logs_p`` channel-first ``[b, out, t]`` (the layout the engine gathers from)."""
        b, t, _ = x.shape
        if self.kernels:
            stats = torch.empty(b, self.proj_kn.w.shape[1], t, device=x.device, dtype=x.dtype)
            self._gemm(x, self.proj_kn, self.proj_b1, stats.transpose(1, 2), lengths=lengths)
            return torch.split(stats, self.out_channels, dim=1)
        stats = torch.baddbmm(self.proj_b, self.proj_w.expand(b, *self.proj_w.shape), x.transpose(1, 2))
        stats.mul_(mask[:, None, :])
        return torch.split(stats, self.out_channels, dim=1)

    # ------------------------------------------------------------------ duration predictor
    def _dds(self, pk: _Dds, buf, mid, m3, lengths):
        """DDSConv on the stream held (masked) in ``mid``, the middle rows of ``buf``; in place."""
        b, t, c = mid.shape
        pad = (buf.shape[1] - t) // 2
        half = pk.k // 2
        for i, dil in enumerate(pk.dil):
            if self.kernels:  # the depthwise convolution, norm and GELU in one kernel
                y = sepconv_ln_gelu(buf, pad, dil, pk.taps_kc[i], pk.sep_b[i], pk.n1[i])
            else:
                taps = pk.taps[i]
                y = torch.addcmul(pk.sep_b[i], buf[:, pad - half * dil:pad - half * dil + t], taps[0])
                for j in range(1, pk.k):
                    o = pad + (j - half) * dil
                    y.addcmul_(buf[:, o:o + t], taps[j])
                g, be, eps = pk.n1[i]
                y = F.gelu(F.layer_norm(y, (c,), g, be, eps))
            if self.kernels:  # mid = (mid + gelu(norm(1x1(y)))) * mask, in place, one kernel
                self._gemm(y, pk.c1_kn[i], pk.c1_b[i], mid, ln=pk.n2[i], act="gelu", residual=mid,
                           post_residual=True, lengths=lengths)
                continue
            y = torch.addmm(pk.c1_b[i], y.view(b * t, c), pk.c1_w[i].t())
            g, be, eps = pk.n2[i]
            y = F.gelu(F.layer_norm(y, (c,), g, be, eps))
            mid.addcmul_(y.view(b, t, c), m3)

    def _durations(self, x, mask, m3, dp_noise, lengths):
        """log-durations ``[b, t]`` (masked)."""
        b, t, _ = x.shape
        fc = self.dp_channels
        pad = self.dds_pad
        buf = x.new_zeros(b, t + 2 * pad, fc)
        mid = buf[:, pad:pad + t]
        flat = buf.view(-1, fc)

        def project(wt, bias, kn):  # a 1x1 convolution of the DDSConv output, times the mask: [b, t, out]
            if self.kernels:
                return self._gemm(mid, kn, bias, x.new_empty(b, t, kn.w.shape[1]), lengths=lengths)
            return torch.addmm(bias, flat, wt.t()).view(b, t + 2 * pad, -1)[:, pad:pad + t] * m3

        if self.kernels:
            self._gemm(x, self.dp_pre_kn, self.dp_pre_b, mid, lengths=lengths)
        else:
            h = torch.addmm(self.dp_pre_b, x.reshape(b * t, -1), self.dp_pre_w.t())
            torch.mul(h.view(b, t, fc), m3, out=mid)
        self._dds(self.dp_dds, buf, mid, m3, lengths)
        cond = project(self.dp_proj_w, self.dp_proj_b, self.dp_proj_kn if self.kernels else None)  # [b, t, fc]

        z = dp_noise * mask[:, None, :]
        z0, z1 = z[:, 0], z[:, 1]
        for op, p in self.plan:
            if op == "flip":
                z0, z1 = z1, z0
            elif op == "conv":
                h = torch.addcmul(p["pre_b"], z0[:, :, None], p["pre_w"])  # pre: 1 -> fc channels
                torch.addcmul(cond, h, m3, out=mid)  # (pre(x0) + g) * mask
                self._dds(p["dds"], buf, mid, m3, lengths)
                st = project(p["proj_w"], p["proj_b"], p.get("proj_kn"))  # [b, t, 3K-1]
                nb = p["nb"]
                if self.kernels:  # the spline and the mask in one kernel
                    z1 = fused_spline_inverse(z1, st, lengths, nb, p["tail"])
                else:
                    z1 = spline_inverse(z1, st, nb, p["tail"], consts=p["consts"]) * mask
            else:  # the affine flow, on the channel that is returned
                return (z0 - p["m"][0]) * p["scale"][0] * mask
        raise AssertionError("unreachable")  # pragma: no cover
