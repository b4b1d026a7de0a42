"""The near-float32 GEMM kernel of stage A (engines.torch_vits.fused_gemm) against plain PyTorch,
and the voice's stage A through it against the same stage A through ordinary float32 GEMMs.

Without a GPU the kernel runs under Triton's CPU interpreter in a child process
(``fused_gemm_cases.py``; see test_fused_conv.py why). The interpreter multiplies float16
operands exactly, so on CPU these tests check the kernel's logic -- layouts, the split into
high and low halves and their recombination, epilogues, masks -- at float32 accuracy (a
dropped remainder term shows up as a 3e-4 error); the float16 tensor cores' own rounding is
measured on the GPU (docs/PERFORMANCE.md).
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("triton", reason="triton is not installed: pip install triton (stage A's GEMM kernel needs it)")
pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")

from engines import EngineSpec  # noqa: E402
from tests.engines import fused_gemm_cases as cases  # noqa: E402
from tests.engines.kernel_child import run_cases  # noqa: E402

HERE = Path(__file__).resolve().parent
# relative to the output's largest value: float32 rounding of a 200-term sum (CPU), and the
# split products' ~22 bits on the tensor cores (CUDA)
TOL = {"cpu": 2e-6, "cuda": 2e-5}


@pytest.fixture(scope="module")
def results(voice):
    return run_cases(HERE / "fused_gemm_cases.py")


@pytest.mark.parametrize("precision", cases.PRECISIONS)
@pytest.mark.parametrize("case", cases.CASE_IDS)
def test_kernel_matches_reference(results, case, precision):
    device, r = results
    got = r[f"{case}@{precision}"]
    assert got["err"] <= TOL[device] * max(1.0, got["scale"]), got


@pytest.mark.parametrize("case", [c[0] for c in cases.DDS_CASES])
def test_dds_prologue_matches_pytorch(results, case):
    # the DDSConv layer's depthwise convolution, LayerNorm and GELU in one kernel: the same values as
    # the PyTorch operations it replaces (float32 on both sides)
    _, r = results
    got = r[case]
    assert got["err"] <= 2e-5 * max(1.0, got["scale"]), got


def test_spline_kernel_matches_pytorch(results):
    # the duration flows' inverse spline and mask in one kernel: the PyTorch spline's values (float32;
    # the softmax and sums in another order), the identity outside the bound, zeros past each length
    _, r = results
    got = r["spline"]
    assert got["err"] <= 2e-5 * max(1.0, got["scale"]) and got["tail_zero"], got


@pytest.mark.parametrize("precision", cases.ATTN_PRECISIONS)
@pytest.mark.parametrize("case", [c[0] for c in cases.ATTN_CASES])
def test_relative_attention_matches_attend(results, case, precision):
    # the encoder's windowed relative attention in one kernel (online softmax over key blocks, the band's
    # relative-key logits and relative-value term picked out of the blocks that meet it): the values of
    # FastStageA._attend, the float32 path it replaces, and of a float64 reference, on every real row, at
    # float32 rounding on CPU (a dropped relative term or a wrong key mask is an error of order 1); rows
    # past each length finite. The cases cover ragged tiles, lengths 1 and T, masked channels and peaked
    # softmaxes. "fp16x3": the interpreter multiplies float16 exactly, so on CPU this checks its split and
    # scales (a dropped remainder product or a wrong scale is an error far above float32 rounding).
    device, r = results
    got = r[f"{case}@{precision}"]
    assert got["pad_finite"], got
    assert got["err"] <= TOL[device] * max(1.0, got["scale"]), got
    assert got["err64"] <= TOL[device] * max(1.0, got["scale"]), got


def test_relative_attention_refuses_unknown_precision():
    # a misspelt precision is one clear error, not a Triton compile error (or a silent "tf32")
    from engines.torch_vits import fused_attn as A

    x = torch.zeros(2, 5, 24)
    with pytest.raises(ValueError, match="precision 'tf32'"):
        A.relative_attention(x, x, x, torch.zeros(24, 3), torch.zeros(3, 24), torch.tensor([5, 5]), 1, x.clone(),
                             precision="tf32")


def test_stage_a_through_kernel(results):
    # the voice's encoder and duration predictor with every GEMM in the kernel, and the attention in its
    # own (engines.torch_vits.fused_attn): the same prior
    # (rounding only), the same integer durations on real sentences, zeros past each length
    device, r = results
    got = r["stage-a"]
    assert got["kernels"] and got["pad_zero"], got
    assert got["prior_rel"] <= 1e-5 and got["logs_rel"] <= 1e-5, got
    # the engine's precompile (dry runs of stage A at 16 and 17 phonemes) covers every specialization
    # this real batch launched
    assert got["launches"] > 0 and got["not_enumerated"] == 0, got
    if device == "cpu":
        assert got["durations_changed"] == 0 and got["frames_equal"], got
    else:  # a value within ~1e-6 of an integer may round the other way, as with any fp32 reordering
        assert got["durations_changed"] <= 1, got


@pytest.mark.parametrize("env, fast, message", [
    ("1", None, "runs on CUDA devices"),          # CPU without the interpreter: one clear line, not a crash
    ("1", False, "channels-last stage A"),        # the kernel serves the fast path only
], ids=["cpu-needs-cuda", "needs-fast-stage-a"])
def test_engine_switch_refusals(voice, monkeypatch, env, fast, message):
    from core.errors import EngineUnavailable
    from engines.torch_engine import TorchEngine
    from engines.torch_options import ENV

    STAGE_A_GEMM_ENV = ENV["stage_a_gemm"]

    monkeypatch.setenv(STAGE_A_GEMM_ENV, env)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(EngineUnavailable, match=message):
        TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1), fast_stage_a=True if fast is None else fast)


@pytest.mark.parametrize("env, want", [(None, "cublas-fp32"), ("0", "cublas-fp32")], ids=["cpu-default", "env-off"])
def test_engine_switch_default_off_on_cpu(voice, monkeypatch, env, want):
    # on CPU the fast stage A keeps ordinary float32 GEMMs unless asked (CUDA default: the kernel)
    from engines.torch_engine import TorchEngine
    from engines.torch_options import ENV

    STAGE_A_GEMM_ENV = ENV["stage_a_gemm"]

    if env is None:
        monkeypatch.delenv(STAGE_A_GEMM_ENV, raising=False)
    else:
        monkeypatch.setenv(STAGE_A_GEMM_ENV, env)
    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1), fast_stage_a=True)
    assert eng.info.extra["stage_a_gemm"] == want and not eng.model.stage_a_kernels


def test_stage_a_takes_its_tiles_from_a_record_not_globals(voice):
    # the tiles are the FastStageA's (a record the caller may pass), handed to each launch; the module
    # defaults stay as they were, and a device move keeps a caller's choice
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    import numpy as np

    from engines.torch_vits import fused_attn, fused_gemm
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer
    from engines.torch_vits.tiles import DEFAULT, StageATiles, tiles_for
    from engines.tools.weights import onnx_state_and_hparams

    state, hp = onnx_state_and_hparams(voice.model_path)
    m = VitsSynthesizer(VitsHParams.from_dict(hp))
    m.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    m.eval().use_fast_stage_a(kernels=True)
    assert m.packed_stage_a.tiles == tiles_for("cpu") == DEFAULT
    mine = StageATiles(gemm_plain=(32, 32, 32, 4, 1), attn_block=(32, 32, 4, 1))
    m.use_fast_stage_a(kernels=True, tiles=mine)
    assert m.packed_stage_a.tiles is mine and m.packed_stage_a._blocks["plain"] == (32, 32, 32, 4, 1)
    m.to("cpu").float()  # a move re-packs: the caller's tiles stay
    assert m.packed_stage_a.tiles is mine
    assert fused_gemm.BLOCKS == DEFAULT.gemm_blocks() and fused_attn.BLOCK == DEFAULT.attn_block
