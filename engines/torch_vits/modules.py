"""The layers of the Piper VITS inference graph, written for batched inference.

Module and parameter names follow the PyTorch state-dict names found in Piper's
ONNX files (``enc_p``, ``dp``, ``flow``, ``dec`` ...), so the weights load with
``load_state_dict``. Weight-norm is already folded into the exported weights.

Tensors are channel-first: ``[B, C, T]``; masks are ``[B, 1, T]`` of 0/1 in the
activations' dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engines.torch_vits.hparams import VitsHParams
from engines.torch_vits.launch import pow2

LRELU_SLOPE = 0.1


def sequence_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B]`` lengths -> bool ``[B, max_len]``."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class LayerNorm(nn.Module):
    """Layer norm over the channel axis of ``[B, C, T]``."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, -1)
        x = F.layer_norm(x, (x.shape[-1],), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


# --------------------------------------------------------------------------- text encoder


class RelativeAttention(nn.Module):
    """Multi-head self-attention with windowed relative position embeddings (shared by heads).

    For a window ``w``, key offsets ``r = j - i`` with ``|r| <= w`` add
    ``q_i . E_k[r + w]`` to the logits and ``p_ij * E_v[r + w]`` to the output;
    offsets beyond the window add nothing.
    """

    def __init__(self, channels: int, n_heads: int, window_size: int):
        super().__init__()
        self.n_heads = n_heads
        self.k_channels = channels // n_heads
        self.window_size = window_size
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, channels, 1)
        n_rel = 2 * window_size + 1
        self.emb_rel_k = nn.Parameter(torch.zeros(1, n_rel, self.k_channels))
        self.emb_rel_v = nn.Parameter(torch.zeros(1, n_rel, self.k_channels))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        b, c, t = x.shape
        h, d, w = self.n_heads, self.k_channels, self.window_size
        q = self.conv_q(x).view(b, h, d, t).transpose(2, 3)  # [b, h, t, d]
        k = self.conv_k(x).view(b, h, d, t).transpose(2, 3)
        v = self.conv_v(x).view(b, h, d, t).transpose(2, 3)
        q = q / math.sqrt(d)
        scores = torch.matmul(q, k.transpose(-2, -1))  # [b, h, t, t]

        pos = torch.arange(t, device=x.device)
        offset = pos[None, :] - pos[:, None]  # [i, j] -> j - i
        in_window = offset.abs() <= w
        rel_idx = (offset + w).clamp(0, 2 * w)
        rel_logits = torch.matmul(q, self.emb_rel_k[0].transpose(0, 1))  # [b, h, t, 2w+1]
        local = torch.gather(rel_logits, 3, rel_idx.expand(b, h, t, t))
        scores = scores + local * in_window.to(scores.dtype)

        scores = scores.masked_fill(attn_mask == 0, -1e4)
        p = torch.softmax(scores, dim=-1)
        out = torch.matmul(p, v)  # [b, h, t, d]

        # p re-indexed by relative offset: pr[i, r] = p[i, i + r - w] where that key exists.
        r = torch.arange(2 * w + 1, device=x.device)
        key = pos[:, None] + r[None, :] - w  # [t, 2w+1]
        key_ok = (key >= 0) & (key < t)
        pr = torch.gather(p, 3, key.clamp(0, t - 1).expand(b, h, t, 2 * w + 1)) * key_ok.to(p.dtype)
        out = out + torch.matmul(pr, self.emb_rel_v[0])
        out = out.transpose(2, 3).reshape(b, c, t)
        return self.conv_o(out)


class FFN(nn.Module):
    def __init__(self, channels: int, filter_channels: int, kernel_size: int):
        super().__init__()
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_1(x * mask))
        return self.conv_2(x * mask) * mask


class Encoder(nn.Module):
    def __init__(self, hp: VitsHParams):
        super().__init__()
        c = hp.hidden_channels
        self.attn_layers = nn.ModuleList(RelativeAttention(c, hp.n_heads, hp.window_size) for _ in range(hp.n_layers))
        self.norm_layers_1 = nn.ModuleList(LayerNorm(c) for _ in range(hp.n_layers))
        self.ffn_layers = nn.ModuleList(FFN(c, hp.filter_channels, hp.ffn_kernel_size) for _ in range(hp.n_layers))
        self.norm_layers_2 = nn.ModuleList(LayerNorm(c) for _ in range(hp.n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attn_mask = mask.unsqueeze(2) * mask.unsqueeze(-1)  # [b, 1, t, t]
        x = x * mask
        for attn, n1, ffn, n2 in zip(self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2):
            x = n1(x + attn(x, attn_mask))
            x = n2(x + ffn(x, mask))
        return x * mask


class TextEncoder(nn.Module):
    def __init__(self, hp: VitsHParams):
        super().__init__()
        self.hidden_channels = hp.hidden_channels
        self.out_channels = hp.inter_channels
        self.emb = nn.Embedding(hp.n_vocab, hp.hidden_channels)
        self.encoder = Encoder(hp)
        self.proj = nn.Conv1d(hp.hidden_channels, 2 * hp.inter_channels, 1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor):
        x = self.emb(ids) * math.sqrt(self.hidden_channels)  # [b, t, h]
        x = self.encoder(x.transpose(1, 2), mask)
        stats = self.proj(x) * mask
        m, logs = torch.split(stats, self.out_channels, dim=1)
        return x, m, logs


# --------------------------------------------------------------------------- duration predictor


def rq_spline_inverse(x, uw, uh, ud, tail_bound: float, min_w: float = 1e-3, min_h: float = 1e-3,
                      min_d: float = 1e-3):
    """Inverse of a monotonic rational-quadratic spline on [-B, B] with linear (identity) tails.

    ``x``: ``[...]``; ``uw``, ``uh``: ``[..., K]`` unnormalized bin widths and heights;
    ``ud``: ``[..., K-1]`` unnormalized inner knot derivatives (the outer ones are 1).
    This is the neural-spline-flow transform (Durkan et al. 2019) used by VITS.
    """
    k = uw.shape[-1]
    inside = (x >= -tail_bound) & (x <= tail_bound)
    xc = x.clamp(-tail_bound, tail_bound)

    def knots(u, min_size):
        size = torch.softmax(u, dim=-1)
        size = min_size + (1 - min_size * k) * size
        cum = F.pad(torch.cumsum(size, dim=-1), (1, 0))
        cum = 2 * tail_bound * cum - tail_bound
        cum = torch.cat([torch.full_like(cum[..., :1], -tail_bound), cum[..., 1:-1],
                         torch.full_like(cum[..., :1], tail_bound)], dim=-1)
        return cum, cum[..., 1:] - cum[..., :-1]

    cumw, widths = knots(uw, min_w)
    cumh, heights = knots(uh, min_h)
    d = min_d + F.softplus(ud)
    one = torch.ones_like(d[..., :1])
    d = torch.cat([one, d, one], dim=-1)  # [..., K+1]; the padded ends give exactly 1

    # bin of each input on the output (height) axis; the last knot is nudged up by 1e-6
    edges = torch.cat([cumh[..., :-1], cumh[..., -1:] + 1e-6], dim=-1)
    idx = (xc[..., None] >= edges).sum(dim=-1, keepdim=True) - 1
    idx = idx.clamp(0, k - 1)

    def pick(t):
        return torch.gather(t, -1, idx)[..., 0]

    in_cumw, in_w = pick(cumw[..., :-1]), pick(widths)
    in_cumh, in_h = pick(cumh[..., :-1]), pick(heights)
    delta = pick(heights / widths)
    d0, d1 = pick(d[..., :-1]), pick(d[..., 1:])

    y = xc - in_cumh
    s = d0 + d1 - 2 * delta
    a = y * s + in_h * (delta - d0)
    b = in_h * d0 - y * s
    c = -delta * y
    disc = b * b - 4 * a * c
    root = (2 * c) / (-b - torch.sqrt(disc))
    out = root * in_w + in_cumw
    return torch.where(inside, out, x)


class DDSConv(nn.Module):
    """Dilated depth-separable convolutions (dilation ``kernel_size ** i``) with exact GELU."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int):
        super().__init__()
        self.convs_sep = nn.ModuleList()
        self.convs_1x1 = nn.ModuleList()
        self.norms_1 = nn.ModuleList()
        self.norms_2 = nn.ModuleList()
        for i in range(n_layers):
            dil = kernel_size**i
            pad = (kernel_size * dil - dil) // 2
            self.convs_sep.append(nn.Conv1d(channels, channels, kernel_size, groups=channels, dilation=dil, padding=pad))
            self.convs_1x1.append(nn.Conv1d(channels, channels, 1))
            self.norms_1.append(LayerNorm(channels))
            self.norms_2.append(LayerNorm(channels))

    def forward(self, x, mask, g=None):
        if g is not None:
            x = x + g
        for sep, n1, c1, n2 in zip(self.convs_sep, self.norms_1, self.convs_1x1, self.norms_2):
            y = F.gelu(n1(sep(x * mask)))
            y = F.gelu(n2(c1(y)))
            x = x + y
        return x * mask


class ConvFlow(nn.Module):
    """Coupling flow on 2 channels whose transform is a rational-quadratic spline."""

    def __init__(self, filter_channels: int, kernel_size: int, n_layers: int, num_bins: int, tail_bound: float):
        super().__init__()
        self.filter_channels = filter_channels
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        self.pre = nn.Conv1d(1, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers)
        self.proj = nn.Conv1d(filter_channels, 3 * num_bins - 1, 1)

    def reverse(self, x, mask, g):
        x0, x1 = x[:, :1], x[:, 1:]
        h = self.convs(self.pre(x0), mask, g=g)
        h = self.proj(h) * mask  # [b, 3K-1, t]
        h = h.transpose(1, 2)  # [b, t, 3K-1]
        nb = self.num_bins
        scale = math.sqrt(self.filter_channels)
        x1 = rq_spline_inverse(x1[:, 0], h[..., :nb] / scale, h[..., nb:2 * nb] / scale, h[..., 2 * nb:],
                               self.tail_bound)
        return torch.cat([x0, x1[:, None]], dim=1) * mask


class ElementwiseAffine(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def reverse(self, x, mask, g=None):
        return (x - self.m) * torch.exp(-self.logs) * mask


class Flip(nn.Module):
    def reverse(self, x, mask, g=None):
        return torch.flip(x, [1])


class StochasticDurationPredictor(nn.Module):
    """VITS' stochastic duration predictor, inference (reverse) direction only.

    ``flows`` keeps the training layout ``[ElementwiseAffine, (ConvFlow, Flip) * n]``
    so the weight names match; inference runs them reversed and skips the first
    ConvFlow (index 1), as VITS does ("remove a useless vflow"). Its weights are
    not in Piper's ONNX files, so that module stays uninitialised and unused.
    """

    def __init__(self, hp: VitsHParams):
        super().__init__()
        fc = hp.dp_filter_channels
        self.pre = nn.Conv1d(hp.hidden_channels, fc, 1)
        self.convs = DDSConv(fc, hp.dp_kernel_size, hp.dp_n_layers)
        self.proj = nn.Conv1d(fc, fc, 1)
        flows: list[nn.Module] = [ElementwiseAffine(2)]
        for _ in range(hp.dp_n_flows):
            flows.append(ConvFlow(fc, hp.dp_kernel_size, hp.dp_n_layers, hp.dp_num_bins, hp.dp_tail_bound))
            flows.append(Flip())
        self.flows = nn.ModuleList(flows)

    def reverse(self, x, mask, noise):
        """``x``: encoder output ``[b, h, t]``; ``noise``: ``[b, 2, t]`` (already times noise_w) -> logw ``[b, 1, t]``."""
        x = self.proj(self.convs(self.pre(x), mask)) * mask
        order = list(reversed(self.flows))
        order = order[:-2] + [order[-1]]
        z = noise
        for flow in order:
            z = flow.reverse(z, mask, g=x)
        return z[:, :1]


# --------------------------------------------------------------------------- flow


class WN(nn.Module):
    def __init__(self, hidden: int, kernel_size: int, dilation_rate: int, n_layers: int):
        super().__init__()
        self.hidden = hidden
        self.n_layers = n_layers
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        for i in range(n_layers):
            dil = dilation_rate**i
            self.in_layers.append(nn.Conv1d(hidden, 2 * hidden, kernel_size, dilation=dil,
                                            padding=(kernel_size * dil - dil) // 2))
            out = 2 * hidden if i < n_layers - 1 else hidden
            self.res_skip_layers.append(nn.Conv1d(hidden, out, 1))

    def forward(self, x, mask):
        """Each convolution runs in its own weights' dtype; the residual and skip streams stay in
        ``x``'s dtype (see :func:`mixed_precision_flow`)."""
        output = None
        dt = x.dtype
        for i, (inl, rs) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            a = inl(x.to(inl.weight.dtype)).to(dt)
            acts = torch.tanh(a[:, : self.hidden]) * torch.sigmoid(a[:, self.hidden:])
            r = rs(acts.to(rs.weight.dtype)).to(dt)
            if i < self.n_layers - 1:
                x = (x + r[:, : self.hidden]) * mask
                skip = r[:, self.hidden:]
            else:
                skip = r
            output = skip if output is None else output + skip
        return output * mask


class ResidualCouplingLayer(nn.Module):
    def __init__(self, channels: int, hidden: int, kernel_size: int, dilation_rate: int, n_layers: int,
                 mean_only: bool):
        super().__init__()
        self.half = channels // 2
        self.mean_only = mean_only
        self.pre = nn.Conv1d(self.half, hidden, 1)
        self.enc = WN(hidden, kernel_size, dilation_rate, n_layers)
        self.post = nn.Conv1d(hidden, self.half * (1 if mean_only else 2), 1)

    def reverse(self, x, mask):
        x0, x1 = x[:, : self.half], x[:, self.half:]
        h = self.pre(x0.to(self.pre.weight.dtype)).to(x.dtype) * mask
        stats = self.post(self.enc(h, mask).to(self.post.weight.dtype)).to(x.dtype) * mask
        if self.mean_only:
            x1 = (x1 - stats) * mask
        else:
            m, logs = stats[:, : self.half], stats[:, self.half:]
            x1 = (x1 - m) * torch.exp(-logs) * mask
        return torch.cat([x0, x1], dim=1)


def mixed_precision_flow(flow: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast only the flow's dilated ``in_layers`` convolutions (~81% of its FLOPs) to ``dtype``.

    The flow feeds the decoder, which amplifies small errors in ``z``. Measured on CPU
    (4 Alice sentences, output SNR against all-fp32, fp16 rounding of one conv group's
    inputs and weights): ``in_layers`` 50-54 dB, ``res_skip_layers`` 45-52 dB, ``pre``/``post``
    44-54 dB, everything 41-48 dB, everything in fp16 storage 40-45 dB. So the coupling
    stream, the WN residual/skip sums and the 1x1 convolutions stay float32.
    """
    for mod in flow.modules():
        if isinstance(mod, WN):
            mod.in_layers.to(dtype)
    return flow


class ResidualCouplingBlock(nn.Module):
    def __init__(self, hp: VitsHParams):
        super().__init__()
        flows: list[nn.Module] = []
        for _ in range(hp.flow_n_flows):
            flows.append(ResidualCouplingLayer(hp.inter_channels, hp.flow_hidden_channels, hp.flow_kernel_size,
                                               hp.flow_dilation_rate, hp.flow_n_layers, hp.flow_mean_only))
            flows.append(Flip())
        self.flows = nn.ModuleList(flows)
        self.fused = False
        self._fused_plan: list | None = None  # packed weights of the fused path (use_fused)

    def reverse(self, x, mask, lengths=None, overwrite: bool = False):
        """``x``: ``[B, C, T]``; ``mask``: ``[B, 1, T]`` prefix mask (``t < length``). With
        :meth:`use_fused` on, the WN layers run through the fused Triton kernel; ``lengths``
        (``[B]``, the mask's lengths) spares deriving them from ``mask``; the output is then a
        ``[B, C, T]`` view of a ``[B, T, C]`` tensor, and with ``overwrite`` a float32 ``x`` laid out
        that way (``x.transpose(1, 2)`` contiguous) is worked in and returned, not copied."""
        if self.fused:
            return self._reverse_fused(x, mask, lengths, overwrite)
        for flow in reversed(self.flows):
            x = flow.reverse(x, mask)
        return x

    def fused_supported(self) -> bool:
        """Whether every coupling layer fits the fused WN kernel (:mod:`engines.torch_vits.fused_wn`):
        mean-only couplings, hidden width 64-256 (multiples of 64), odd kernels, no global conditioning
        (this port's WN has none)."""
        from engines.torch_vits import fused_wn

        couplings = [f for f in self.flows if not isinstance(f, Flip)]
        if not couplings or not all(isinstance(f, ResidualCouplingLayer) for f in couplings):
            return False
        return all(f.mean_only and not hasattr(f.enc, "cond_layer")
                   and all(fused_wn.supports(inl.in_channels, inl.kernel_size[0]) for inl in f.enc.in_layers)
                   for f in couplings)

    def use_fused(self, on: bool = True, block: tuple | None = None) -> "ResidualCouplingBlock":
        """Run :meth:`reverse` with the WN layers through the fused Triton kernel, and each coupling's
        ``post`` convolution, update and the next coupling's ``pre`` convolution through
        :func:`~engines.torch_vits.fused_wn.coupling_io` (split float16 products, about 22 bits). Call
        after any dtype/device move: the kernels' weight layouts are made here (the ``in_layers``
        keep their dtype: fp16/bf16 after :func:`mixed_precision_flow`; the rest is float32).

        The fused path keeps the stream in ``[B, T, C]`` float32 from entry to exit (at most one
        layout change on the way in, none on the way out: the result is a ``[B, C, T]`` view) and
        applies no Flip: a coupling layer that would see the channels flipped reads and writes the
        unflipped halves with ``pre``'s input columns and ``post``'s output rows reversed instead,
        which is the same arithmetic.
        ``block``: the kernel's (time positions per program, warps[, stages]), for tuning."""
        from engines.torch_vits import fused_wn

        if on and not self.fused_supported():
            raise ValueError("the fused WN kernel takes mean-only couplings with 64-256 hidden channels "
                             "(multiples of 64) and odd kernels; this flow has others")
        plan = []
        if on:
            flipped = False
            for f in reversed(self.flows):
                if isinstance(f, Flip):
                    flipped = not flipped
                    continue
                w_pre = f.pre.weight.detach()[:, :, 0].float()
                w_post = f.post.weight.detach()[:, :, 0].float()
                b_post = f.post.bias.detach().float()
                if flipped:  # the layer's x0 is the reversed upper half, its x1 the reversed lower half
                    w_pre, w_post, b_post = w_pre.flip(1), w_post.flip(0), b_post.flip(0)
                hidden = w_pre.shape[0]
                hp = pow2(f.half)  # the half as a power-of-two tile
                plan.append({"upper_in": flipped, "half": f.half,
                             "pre": {**fused_wn.pack_matrix(w_pre.t(), hp, hidden),
                                     "b": f.pre.bias.detach().float().contiguous()},
                             "post": {**fused_wn.pack_matrix(w_post.t(), hidden, hp), "b": b_post.contiguous()},
                             "wn": fused_wn.pack_wn(f.enc)})
            plan.append({"final_flip": flipped, "block": block})
        self._fused_plan = plan if on else None
        self.fused = on
        return self

    def _reverse_fused(self, x, mask, lengths=None, overwrite: bool = False):
        from engines.torch_vits import fused_wn

        b, c, t = x.shape
        if lengths is None:
            lengths = mask.reshape(b, t).sum(dim=1)
        lengths = lengths.to(torch.int32).contiguous()
        y = x.transpose(1, 2).float().contiguous()  # [B, T, C], never flipped (see use_fused)
        if y.data_ptr() == x.data_ptr() and not overwrite:
            y = y.clone()  # x is already [B, T, C] in memory: work in a copy of it
        steps, block = self._fused_plan[:-1], self._fused_plan[-1]["block"]
        xc_dtype = steps[0]["wn"][0]["w_in"].dtype

        def halves(step):  # (offset of the half the coupling reads, of the half it updates)
            return (step["half"], 0) if step["upper_in"] else (0, step["half"])

        h, hc = fused_wn.coupling_io(y, lengths, steps[0]["half"], pre=steps[0]["pre"], src=halves(steps[0])[0],
                                     xc_dtype=xc_dtype)
        for i, step in enumerate(steps):
            skip = fused_wn.wn(h, step["wn"], lengths, xc=hc, block=block)
            dst = halves(step)[1]
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if nxt is not None and halves(nxt)[0] != dst:  # no Flip in between: its own pass for the next input
                fused_wn.coupling_io(y, lengths, step["half"], skip=skip, post=step["post"], dst=dst)
                h, hc = fused_wn.coupling_io(y, lengths, nxt["half"], pre=nxt["pre"], src=halves(nxt)[0],
                                             xc_dtype=xc_dtype)
            else:  # x1 = (x1 - post(skip)) * mask in place in y, then the next coupling's pre from registers
                h, hc = fused_wn.coupling_io(y, lengths, step["half"], skip=skip, post=step["post"], dst=dst,
                                             pre=None if nxt is None else nxt["pre"], src=dst, xc_dtype=xc_dtype)
        if self._fused_plan[-1]["final_flip"]:
            y = y.flip(-1)
        return y.transpose(1, 2).to(x.dtype)  # [B, C, T], channels last in memory: the decoder's NHWC layout


# --------------------------------------------------------------------------- generator


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations):
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, dilation=d,
                                              padding=(kernel_size * d - d) // 2) for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2)
                                    for _ in dilations)

    def forward(self, x, mask, conv=None):
        conv = conv or (lambda m, t: m(t))
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = conv(c1, F.leaky_relu(x, LRELU_SLOPE) * mask)
            xt = conv(c2, F.leaky_relu(xt, LRELU_SLOPE) * mask)
            x = x + xt
        return x


class ResBlock2(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, dilation=d,
                                             padding=(kernel_size * d - d) // 2) for d in dilations)

    def forward(self, x, mask, conv=None):
        conv = conv or (lambda m, t: m(t))
        for c in self.convs:
            x = x + conv(c, F.leaky_relu(x, LRELU_SLOPE) * mask)
        return x


class Generator(nn.Module):
    """HiFi-GAN generator. Every convolution's input is multiplied by the time mask at its
    resolution, so an item's samples inside its true length do not depend on the padding
    after it (a padded item equals the same item run alone, up to rounding).

    :meth:`use_channels_last` switches to 2-D convolutions on ``[B, C, 1, T]`` tensors in
    channels-last (NHWC) memory layout, the layout of cuDNN's half-precision tensor-core
    kernels (same weights, same arithmetic)."""

    def __init__(self, hp: VitsHParams):
        super().__init__()
        ch = hp.upsample_initial_channel
        self.upsample_rates = list(hp.upsample_rates)
        self.num_kernels = len(hp.resblock_kernel_sizes)
        self.conv_pre = nn.Conv1d(hp.inter_channels, ch, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        block = ResBlock2 if hp.resblock == "2" else ResBlock1
        for i, (u, k) in enumerate(zip(hp.upsample_rates, hp.upsample_kernel_sizes)):
            self.ups.append(nn.ConvTranspose1d(ch // 2**i, ch // 2 ** (i + 1), k, u, padding=(k - u) // 2))
            for rk, rd in zip(hp.resblock_kernel_sizes, hp.resblock_dilations):
                self.resblocks.append(block(ch // 2 ** (i + 1), rk, rd))
        self.conv_post = nn.Conv1d(ch // 2 ** len(self.ups), 1, 7, padding=3, bias=False)
        self.channels_last = False
        self.fused = False

    def use_channels_last(self, on: bool = True) -> "Generator":
        """Run as 2-D NHWC convolutions. Call after any dtype/device move: the 4-D weights
        (attribute ``weight_nhwc`` of each convolution) are laid out once, here."""
        self.channels_last = on
        for m in self.modules():
            if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
                m.weight_nhwc = (m.weight.detach().unsqueeze(2).contiguous(memory_format=torch.channels_last)
                                 if on else None)
        return self

    def use_fused_resblocks(self, on: bool = True) -> "Generator":
        """Run the resblocks with the fused Triton kernel (:mod:`engines.torch_vits.fused_conv`):
        one memory pass per convolution instead of six or seven. Implies :meth:`use_channels_last`
        (the kernel's ``[B, T, C]`` tensors are the NHWC tensors' memory). Call after any
        dtype/device move: the kernel's weight layout is made here."""
        from engines.torch_vits import fused_conv

        if on and not self.fused_supported():
            raise ValueError("the fused resblock kernel takes 16-128 channels (powers of two) and odd kernels; "
                             "this decoder has others")
        if on:
            self.use_channels_last(True)
            for rb in self.resblocks:
                for m in rb.modules():
                    if isinstance(m, nn.Conv1d):
                        m.weight_kio = fused_conv.pack_weight(m.weight)
            self.conv_post.weight_kc = fused_conv.pack_post_weight(self.conv_post.weight)
            for up in self.ups:  # the upsampling layers the polyphase kernel fits; others stay cuDNN
                fits = fused_conv.upsample_supported(up.in_channels, up.out_channels, up.kernel_size[0],
                                                     up.stride[0], up.padding[0])
                up.weight_up = fused_conv.pack_up_weight(up.weight) if fits else None
        self.fused = on
        return self

    def fused_supported(self) -> bool:
        """Whether every resblock convolution fits the fused kernel (channel count, odd kernel)."""
        from engines.torch_vits import fused_conv

        return all(fused_conv.supports(m.in_channels, m.kernel_size[0]) and m.in_channels == m.out_channels
                   for rb in self.resblocks for m in rb.modules() if isinstance(m, nn.Conv1d))

    def _fused_resblocks(self, x, lengths, scale, stage, post_slope=None):
        """The resblocks of one upsampling stage and their average, on a channels-last
        ``[B, C, 1, T]`` tensor, through the fused kernel; returns the same layout. With
        ``post_slope`` it returns ``leaky_relu(average, post_slope) * mask``, the next layer's input."""
        from engines.torch_vits.fused_conv import resconv

        xb = self._btc(x)
        lengths = lengths.contiguous()
        total = torch.empty_like(xb)
        for j in range(self.num_kernels):
            rb = self.resblocks[self.num_kernels * stage + j]
            last = j == self.num_kernels - 1
            fin = dict(accumulate=total if j else None, out=total, out_scale=1.0 / self.num_kernels if last else 1.0,
                       post_slope=post_slope if last else None)
            if isinstance(rb, ResBlock2):
                h = xb
                for n, c in enumerate(rb.convs):
                    kw = fin if n == len(rb.convs) - 1 else {}
                    h = resconv(h, c.weight_kio, c.bias, lengths, scale, c.dilation[0], residual=h, **kw)
            else:
                h = xb
                for n, (c1, c2) in enumerate(zip(rb.convs1, rb.convs2)):
                    kw = fin if n == len(rb.convs1) - 1 else {}
                    t = resconv(h, c1.weight_kio, c1.bias, lengths, scale, c1.dilation[0])
                    h = resconv(t, c2.weight_kio, c2.bias, lengths, scale, c2.dilation[0], residual=h, **kw)
        return total.transpose(1, 2).unsqueeze(2)

    @staticmethod
    def _btc(x):
        """The ``[B, T, C]`` contiguous view of a channels-last ``[B, C, 1, T]`` tensor (the kernels'
        layout; a copy only if the tensor is not NHWC)."""
        xb = x.squeeze(2).transpose(1, 2)
        return xb if xb.is_contiguous() else xb.contiguous()

    def _upsample(self, up, x, lengths=None, out_scale: int = 1):
        """The transposed convolution ``up``; through the polyphase kernel when fused, whose output is
        then zero past ``lengths * out_scale`` (output positions) when ``lengths`` is given."""
        if not (self.fused and getattr(up, "weight_up", None) is not None):
            return self._conv(up, x)
        from engines.torch_vits.fused_conv import upsample

        y = upsample(self._btc(x), up.weight_up, up.bias, up.stride[0], up.padding[0],
                     lengths=None if lengths is None else lengths.contiguous(), len_scale=out_scale)
        return y.transpose(1, 2).unsqueeze(2)  # NHWC again

    def _conv(self, m, x):
        if x.dim() == 3:
            return m(x)
        w = m.weight_nhwc
        if isinstance(m, nn.ConvTranspose1d):
            return F.conv_transpose2d(x, w, m.bias, stride=(1, m.stride[0]), padding=(0, m.padding[0]))
        return F.conv2d(x, w, m.bias, stride=(1, m.stride[0]), padding=(0, m.padding[0]),
                        dilation=(1, m.dilation[0]), groups=m.groups)

    def _mask(self, lengths, n, like):
        mask = sequence_mask(lengths, n).to(like.dtype)
        return mask[:, None, None, :] if like.dim() == 4 else mask[:, None, :]

    def forward(self, x, lengths, pcm_scale: float | None = None):
        """``x``: ``[b, c, frames]`` (zero past each length); ``lengths``: ``[b]`` frames -> ``[b, frames*hop]``
        audio in [-1, 1], or with ``pcm_scale`` int16 PCM ``clamp(audio * pcm_scale)`` (truncated)."""
        t = x.shape[-1]
        if self.channels_last:
            x = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        x = self._conv(self.conv_pre, x)
        scale = 1
        active = False  # x already went through leaky ReLU and the mask (the fused kernel's epilogue)
        for i, up in enumerate(self.ups):
            if not active:
                x = F.leaky_relu(x, LRELU_SLOPE) * self._mask(lengths * scale, t * scale, x)
            x = self._upsample(up, x, lengths, scale * self.upsample_rates[i])
            scale *= self.upsample_rates[i]
            if self.fused:  # conv_post's leaky ReLU has PyTorch's default slope 0.01, as in VITS
                x = self._fused_resblocks(x, lengths, scale, i, post_slope=0.01 if i == len(self.ups) - 1 else
                                          LRELU_SLOPE)
                active = True
                continue
            mask = self._mask(lengths * scale, t * scale, x)
            xs = None
            for j in range(self.num_kernels):
                y = self.resblocks[i * self.num_kernels + j](x, mask, self._conv)
                xs = y if xs is None else xs + y
            x = xs / self.num_kernels
        if active and pcm_scale is not None:  # conv_post, tanh, mask and PCM in one kernel
            from engines.torch_vits.fused_conv import postconv_pcm

            return postconv_pcm(self._btc(x), self.conv_post.weight_kc, lengths.contiguous(), scale, pcm_scale)
        mask = self._mask(lengths * scale, t * scale, x)
        x = self._conv(self.conv_post, x if active else F.leaky_relu(x) * mask)  # default slope 0.01, as in VITS
        x = (torch.tanh(x) * mask).reshape(x.shape[0], -1)
        if pcm_scale is None:
            return x
        return (x.float() * pcm_scale).clamp(-pcm_scale, pcm_scale).to(torch.int16)
