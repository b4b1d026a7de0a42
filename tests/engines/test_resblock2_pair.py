"""The pair-fused ResBlock2 kernel (``fused_conv.resblock2_pair``) against two plain PyTorch steps.

Like test_fused_conv.py: the cases (``resblock2_cases.py``) run in a child process, under Triton's
CPU interpreter in fp32 without a GPU, on the GPU in fp16 with one.
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("triton", reason="triton is not installed: pip install triton (the fused decoder kernel needs it)")

from engines.torch_vits import fused_conv  # noqa: E402
from tests.engines import resblock2_cases as cases  # noqa: E402
from tests.engines.kernel_child import run_cases  # noqa: E402

HERE = Path(__file__).resolve().parent

# fp32 under the interpreter: summation order only (about 1e-6 measured). fp16 on the GPU (not run
# here, no GPU): h1 is rounded to fp16 where two resconv calls round it, but a one-unit difference
# there passes through the second convolution, so allow a few units of the output's last place.
TOL = {"float32": 1e-5, "float16": 2.0**-7}


@pytest.fixture(scope="module")
def results():
    return run_cases(HERE / "resblock2_cases.py")


@pytest.mark.parametrize("case", [c[0] for c in cases.PAIR_CASES])
def test_pair_matches_two_reference_steps(results, case):
    _, r = results
    got = r[case]
    assert got["err"] <= TOL[got["dtype"]] * max(1.0, got["scale"]), got
    if got["tail"] is not None:  # the post-activation epilogue zeroes everything past the length
        assert got["tail"] == 0.0, got


@pytest.mark.parametrize("k, d2, sub", [(3, 2, 16), (5, 6, 32), (7, 12, 16), (7, 12, 64), (1, 1, 16)])
def test_ring_holds_what_a_step_reads(k, d2, sub):
    # an output chunk reads h1 from its own chunk to LAG chunks on; the ring must hold those plus the
    # chunk a thread one step ahead writes
    lag, ring = fused_conv._pair_lag(k, d2, sub)
    reach = 2 * ((k - 1) // 2 * d2)  # conv2's window past the chunk, both sides
    assert (lag - 1) * sub < reach <= lag * sub or lag == reach == 0
    assert ring >= lag + 2 and ring & (ring - 1) == 0


def test_span_choice_fills_the_grid():
    # 64 items of 4096 positions, 64-row chunks, 264 programs: spans of 16 chunks (256 of them, one wave)
    assert fused_conv._pair_span(64, 4096, 64, 2, 264) == 16
    assert fused_conv._pair_span(1, 100, 64, 1, 3) == 1  # one short item: a chunk per program


def test_pair_refuses_to_overwrite_its_input():
    x = torch.zeros(1, 32, 16)
    w = torch.zeros(3, 16, 16)
    b = torch.zeros(16)
    with pytest.raises(ValueError, match="over its input"):
        fused_conv.resblock2_pair(x, w, b, w, b, torch.tensor([32]), 1, 1, 2, out=x)
