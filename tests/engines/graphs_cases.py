"""Cases for test_graphs.py that need stage A's GEMM kernel or a GPU, run in a child process
(:func:`tests.engines.kernel_child.run_cases`): on CPU under Triton's interpreter, on CUDA natively.

``python tests/engines/graphs_cases.py [cpu|cuda]`` prints one JSON object:

* ``padding``: the voice's stage A through the GEMM kernel (the engine's default path on CUDA) on a
  chunk of real sentences, as is and grown by padding rows (:func:`engines.torch_engine.pad_stage_a_inputs`):
  how far the real rows' outputs moved;
* on CUDA only, ``graphs``: :class:`engines.torch_vits.graphs.GraphCache` over that stage A (first
  sight, capture, replays with other values of the same shape, on a side stream, after another
  key's capture into the shared pool) against eager runs, and its counters; ``failure``: a function
  with a host sync inside (a capture that must fail): the warning, the eager result, the cache off.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from engines.torch_engine import pad_stage_a_inputs, round_rows  # noqa: E402
from engines.torch_vits.graphs import GraphCache  # noqa: E402
from engines.torch_vits.tiles import StageATiles  # noqa: E402

#: few, large GEMM tiles under the interpreter (its time grows with the number of programs)
CPU_TILES = StageATiles(gemm_plain=(512, 256, 256, 4, 1), gemm_ln=(512, 256, 256, 4, 1))
#: real items of the chunk; padded to round_rows of it and to a larger size
ITEMS = 5
MORE_ROWS = 8


def model(device: str):
    """The voice's model (fp32), stage A channels-last through the GEMM kernel, on ``device``."""
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer

    if os.environ.get("BOOKTTS_TORCH_WEIGHTS"):  # a GPU host without the voice package: the exported weights
        from engines.tools.weights import read_weights

        state, hp, _ = read_weights(os.environ["BOOKTTS_TORCH_WEIGHTS"])
    else:
        from engines.tools.weights import onnx_state_and_hparams
        from core.voice import resolve_voice

        state, hp = onnx_state_and_hparams(resolve_voice().model_path)
    m = VitsSynthesizer(VitsHParams.from_dict(hp))
    m.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    return m.eval().to(device).use_fast_stage_a(kernels=True, tiles=CPU_TILES if device == "cpu" else None)


def chunk(device: str, seed: int = 3):
    """A stage-A chunk of ``ITEMS`` real sentences: ids, lengths, duration noise (noise_w 0.8)."""
    d = np.load(ROOT / "bench" / "data" / "alice_ids.npz")
    off = d["offsets"]
    seqs = [d["ids"][off[i]:off[i + 1]].astype(np.int64) for i in range(len(off) - 1)]
    rng = np.random.default_rng(seed)
    pool = [s for s in seqs if 16 <= len(s) <= 60]
    pick = [pool[i] for i in rng.choice(len(pool), size=ITEMS, replace=False)]
    t = -(-max(len(s) for s in pick) // 32) * 32
    ids = torch.zeros(ITEMS, t, dtype=torch.long)
    for i, s in enumerate(pick):
        ids[i, :len(s)] = torch.from_numpy(s)
    lengths = torch.tensor([len(s) for s in pick])
    noise = torch.randn(ITEMS, 2, t, generator=torch.Generator().manual_seed(seed)) * 0.8
    return ids.to(device), lengths.to(device), noise.to(device)


def compare(got, want, n: int) -> dict:
    """The real rows (the first ``n``) of stage-A outputs ``got`` against ``want``."""
    m, lg, du, fr = (z[:n].cpu() for z in got)
    m0, l0, d0, f0 = (z.cpu() for z in want)
    return {"prior_rel": float(max((m - m0).abs().max() / m0.abs().max(), (lg - l0).abs().max() / l0.abs().max())),
            "bitwise": bool(torch.equal(m, m0) and torch.equal(lg, l0)),
            "durations_equal": bool(torch.equal(du, d0)), "frames_equal": bool(torch.equal(fr, f0))}


def padding_case(mdl, device: str) -> dict:
    ids, lengths, noise = chunk(device)
    out = {}
    with torch.inference_mode():
        want = mdl.stage_a(ids, lengths, noise, 1.0)
        for rows in (round_rows(ITEMS), MORE_ROWS):
            got = mdl.stage_a(*pad_stage_a_inputs(ids, lengths, noise, rows), 1.0)
            r = compare(got, want, ITEMS)
            r["padding_finite"] = bool(all(torch.isfinite(z[ITEMS:].float()).all() for z in got))
            out[str(rows)] = r
    return out


def graphs_case(mdl, device: str) -> dict:
    ids, lengths, noise = chunk(device)
    ids2, lengths2, noise2 = chunk(device, seed=8)  # other values (the same width: multiples of 32)
    width = max(ids.shape[1], ids2.shape[1])

    def inputs(i, ln, nz, rows):
        i = torch.nn.functional.pad(i, (0, width - i.shape[1]))
        nz = torch.nn.functional.pad(nz, (0, width - nz.shape[1]))
        return pad_stage_a_inputs(i, ln, nz, rows)

    a, b, c = inputs(ids, lengths, noise, 6), inputs(ids2, lengths2, noise2, 6), inputs(ids, lengths, noise, 8)
    out = {}
    with torch.inference_mode():
        eager = {k: tuple(z.clone() for z in mdl.stage_a(*x, 1.0)) for k, x in (("a", a), ("b", b), ("c", c))}
        cache = GraphCache(mdl.stage_a, device, name="test")

        def check(name, key, x, want):
            got = cache(key, x, 1.0)
            out[name] = bool(all(torch.equal(g, w) for g, w in zip(got, eager[want])))
            return got

        check("first_sight_eager", (6, width), a, "a")
        first = check("capture", (6, width), a, "a")
        check("replay_other_values", (6, width), b, "b")
        again = check("replay_same_values", (6, width), a, "a")
        out["outputs_are_static"] = first[0].data_ptr() == again[0].data_ptr()
        check("other_key_first_sight", (8, width), c, "c")
        check("other_key_capture", (8, width), c, "c")
        check("replay_after_other_capture", (6, width), b, "b")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = cache((6, width), a, 1.0)
            side_ok = all(torch.equal(g, w) for g, w in zip(got, eager["a"]))
        torch.cuda.current_stream().wait_stream(side)
        out["replay_on_side_stream"] = bool(side_ok)
    out["stats"] = cache.stats.as_dict()
    out["graphs"] = len(cache)
    return out


def failure_case(device: str) -> dict:
    def syncs(x):
        return x * float(x.sum().item())  # a host sync: not capturable

    x = torch.arange(4.0, device=device)
    cache = GraphCache(syncs, device, name="test")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = cache("k", (x,))
        second = cache("k", (x,))  # the capture fails here
        third = cache("k", (x,))
    want = syncs(x)
    return {"equal": bool(torch.equal(first, want) and torch.equal(second, want) and torch.equal(third, want)),
            "enabled": cache.enabled, "error": cache.error,
            "warnings": [str(w.message) for w in caught if str(w.message).startswith("test:")],
            "other_warnings": [str(w.message)[:200] for w in caught if not str(w.message).startswith("test:")],
            "stats": cache.stats.as_dict(), "cuda_ok": float(torch.ones(3, device=device).sum().item()) == 3.0}


def main(device: str) -> dict:
    mdl = model(device)
    out = {"padding": padding_case(mdl, device)}
    if device == "cuda":
        out["graphs"] = graphs_case(mdl, device)
        out["failure"] = failure_case(device)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "cpu")))
