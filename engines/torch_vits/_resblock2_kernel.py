"""A ResBlock2 step pair in one Triton kernel: :func:`engines.torch_vits.fused_conv.resblock2_pair`.

ResBlock2 (the voice's resblocks) is two steps ``h1 = x + conv1(lrelu(x) * mask) + b1`` and
``out = h1 + conv2(lrelu(h1) * mask) + b2`` (then, as :func:`~engines.torch_vits.fused_conv.resconv`
has it, ``+ accumulate``, ``* out_scale`` and the optional leaky ReLU + mask epilogue). Two
``resconv`` launches write ``h1`` to DRAM and read it back; this kernel keeps it on chip (in L1/L2).

Design (Triton cannot shift a register tile, so ``h1`` goes through a small scratch buffer):

* The grid is persistent: a few programs per SM loop over *spans* (``span_chunks * SUB``
  consecutive time positions of one item). A span is processed as a stream of ``SUB``-row chunks.
* Each program owns a ring of ``RING`` chunks of ``h1`` (``[RING * SUB, C]``, the input's dtype) in a
  scratch tensor in global memory, ``RING * SUB * C`` elements per program, so the scratch is
  bounded by the grid, not by the input.
* Window coordinate ``w`` of a span starting at ``p0`` is time ``p0 - HALO2 + w``, with
  ``HALO2 = (K - 1) // 2 * D2`` (conv2's reach). Step ``i`` computes chunk ``i`` of ``h1`` (conv1 of
  ``x`` straight from global memory, as ``resconv`` does) into ring slot ``i % RING``. Output chunk
  ``o`` needs ``h1`` chunks ``o .. o + LAG`` with ``LAG = ceil(2 * HALO2 / SUB)``, so after a prologue
  of ``LAG`` chunks each step computes ``h1`` chunk ``o + LAG``, waits at a barrier, then computes
  output chunk ``o`` from ``K`` shifted loads of the ring (leaky ReLU and the time mask applied on
  load; the residual ``h1`` is read from the ring too).
* ``h1`` is rounded to the input's dtype when it is stored, exactly where two ``resconv`` calls
  round it (the first call's output), so the pair agrees with them to the last bit in the usual case.
* One barrier per step is enough when ``RING >= LAG + 2``: a thread one step ahead overwrites a
  slot no thread still reads (plus one barrier after each span, before the ring is reused).
  The loop must not be software-pipelined (a load of the ring hoisted above the barrier would read
  a stale chunk): the wrapper launches with ``num_stages=1``.
* Cost: conv1 is computed ``LAG * SUB`` extra positions per span (the halo; small for long spans),
  and every chunk reloads its ``2 * K`` weight taps from L2, as ``resconv`` does per tile.
* Registers (ptxas for sm_90 from Triton 3.9, compiled offline, 64 x 4 chunks): 254 at 128 channels,
  127 at 64, 80 at 32, no spills (``resconv`` at 64 x 4: 170, 109, 54).

What it does not know: the model, the voice, or whether the GPU keeps the ring in L1 (it is plain
global memory; only a measurement says how fast it is). It computes positions past an item's
length like ``resconv`` does (their conv inputs read as zero; the residuals do not), and it does not
skip spans past the length. It needs a CUDA device or ``TRITON_INTERPRET=1`` with CPU tensors.
"""

import triton
import triton.language as tl


@triton.jit
def _h1_chunk(x_ptr, w1_ptr, b1_ptr, ring, i, p0, base, length, T, dilation1, slope,
              offs_r, offs_c, C: tl.constexpr, K: tl.constexpr, SUB: tl.constexpr, HALO2: tl.constexpr,
              RMASK: tl.constexpr):
    # h1 = x + conv1(lrelu(x) * mask) + b1 on window chunk i, stored to its ring slot
    w = i * SUB + offs_r
    p = p0 - HALO2 + w
    acc = tl.zeros((SUB, C), dtype=tl.float32)
    for j in tl.static_range(K):
        src = p + (j - (K - 1) // 2) * dilation1
        ok = (src >= 0) & (src < length)
        xt = tl.load(x_ptr + base + src[:, None] * C + offs_c[None, :], mask=ok[:, None], other=0.0)
        xt = tl.where(xt > 0, xt, xt * slope).to(x_ptr.dtype.element_ty)
        wj = tl.load(w1_ptr + j * C * C + offs_c[:, None] * C + offs_c[None, :])
        acc += tl.dot(xt, wj)
    acc += tl.load(b1_ptr + offs_c).to(tl.float32)[None, :]
    acc += tl.load(x_ptr + base + p[:, None] * C + offs_c[None, :], mask=((p >= 0) & (p < T))[:, None],
                   other=0.0).to(tl.float32)
    tl.store(ring + (w & RMASK)[:, None] * C + offs_c[None, :], acc.to(x_ptr.dtype.element_ty))


# the span arguments change with the span and grid chosen at run time: not specialised (a value of 1
# or a multiple of 16 would otherwise compile another variant)
@triton.jit(do_not_specialize=["span_chunks", "spans_per_item", "n_spans"])
def resblock2_kernel(x_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, acc_ptr, out_ptr, len_ptr, ring_ptr,
                     T, len_scale, dilation1, out_scale, slope, post_slope, span_chunks, spans_per_item, n_spans,
                     C: tl.constexpr, K: tl.constexpr, D2: tl.constexpr, SUB: tl.constexpr, LAG: tl.constexpr,
                     RING: tl.constexpr, HAS_ACC: tl.constexpr, HAS_POST: tl.constexpr):
    HALO2: tl.constexpr = (K - 1) // 2 * D2
    RMASK: tl.constexpr = RING * SUB - 1
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs_r = tl.arange(0, SUB)
    offs_c = tl.arange(0, C)
    ring = ring_ptr + pid.to(tl.int64) * (RING * SUB * C)
    span_len = span_chunks * SUB
    for s in range(pid, n_spans, nprog):
        item32 = s // spans_per_item
        p0 = (s - item32 * spans_per_item) * span_len
        item = item32.to(tl.int64)
        length = tl.minimum(tl.load(len_ptr + item).to(tl.int32) * len_scale, T)
        base = item * T * C
        n_chunks = (tl.minimum(span_len, T - p0) + SUB - 1) // SUB
        for i in range(LAG):  # prologue: the first LAG chunks of h1
            _h1_chunk(x_ptr, w1_ptr, b1_ptr, ring, i, p0, base, length, T, dilation1, slope, offs_r, offs_c,
                      C, K, SUB, HALO2, RMASK)
        for o in range(n_chunks):
            _h1_chunk(x_ptr, w1_ptr, b1_ptr, ring, o + LAG, p0, base, length, T, dilation1, slope, offs_r, offs_c,
                      C, K, SUB, HALO2, RMASK)
            tl.debug_barrier()  # h1 chunks o .. o + LAG are in the ring
            w = o * SUB + offs_r
            q = p0 + w
            acc = tl.zeros((SUB, C), dtype=tl.float32)
            for j in tl.static_range(K):
                src = q + (j - (K - 1) // 2) * D2
                ok = (src >= 0) & (src < length)
                ht = tl.load(ring + ((w + j * D2) & RMASK)[:, None] * C + offs_c[None, :], mask=ok[:, None],
                             other=0.0)
                ht = tl.where(ht > 0, ht, ht * slope).to(x_ptr.dtype.element_ty)
                wj = tl.load(w2_ptr + j * C * C + offs_c[:, None] * C + offs_c[None, :])
                acc += tl.dot(ht, wj)
            acc += tl.load(b2_ptr + offs_c).to(tl.float32)[None, :]  # per chunk: held across the loop it
            # would take a register per column a thread holds (spills at 128 channels)
            acc += tl.load(ring + ((w + HALO2) & RMASK)[:, None] * C + offs_c[None, :]).to(tl.float32)
            inside = (q < T)[:, None]
            here = base + q[:, None] * C + offs_c[None, :]
            if HAS_ACC:
                acc += tl.load(acc_ptr + here, mask=inside, other=0.0).to(tl.float32)
            acc = acc * out_scale
            if HAS_POST:  # the next layer's input: leaky ReLU, then the time mask
                acc = tl.where(acc > 0, acc, acc * post_slope)
                acc = tl.where((q < length)[:, None], acc, 0.0)
            tl.store(out_ptr + here, acc.to(out_ptr.dtype.element_ty), mask=inside)
        tl.debug_barrier()  # every thread is done with this span's ring before the next span writes it
