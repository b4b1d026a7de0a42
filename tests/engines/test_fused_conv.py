"""The fused Triton resblock convolution against plain PyTorch.

Without a GPU (CI) the kernel runs under Triton's CPU interpreter, which needs
``TRITON_INTERPRET=1`` before Triton is first imported; other tests in the same
process may already have imported it (torch.compile does), so the cases run in a
child process (``fused_conv_cases.py``) and this module checks what it reports.
On a CUDA host the same cases run on the GPU.
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("triton", reason="triton is not installed: pip install triton (the fused decoder kernel needs it)")

from tests.engines.kernel_child import run_cases  # noqa: E402
from tests.engines import fused_conv_cases as cases  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(voice):
    return run_cases(HERE / "fused_conv_cases.py")


# fp16 keeps 11 significant bits, bf16 8: the kernel rounds once at the store, the reference too,
# so they differ by about one unit in the last place of the output's magnitude.
TOL = {"float16": 2.0**-9, "bfloat16": 2.0**-6, "float32": 1e-5}


@pytest.mark.parametrize("case", [c[0] for c in cases.KERNEL_CASES])
def test_kernel_matches_reference(results, case):
    device, r = results
    if case not in r:
        why = ("tl.dot rounds fp32 to tf32 on the GPU (the engine runs the kernel at fp16/bf16 only)" if device == "cuda"
               else "Triton's CPU interpreter computes bf16 wrongly (numpy has no bf16); this case runs on CUDA")
        pytest.skip(f"{case} is not run on {device}: {why}")
    got = r[case]
    assert got["err"] <= TOL[got["dtype"]] * max(1.0, got["scale"]), got


def test_fused_decoder_matches_plain(results):
    # the voice's decoder: every resblock through the kernel against the PyTorch layers
    device, r = results
    limit = 1e-4 if device == "cpu" else 2e-2  # fp32 in the interpreter; fp16 on both sides on the GPU
    assert r["decoder-fused-vs-plain"]["rel_l2"] <= limit, r["decoder-fused-vs-plain"]


@pytest.mark.parametrize("case", ["upsample-32to16-x4", "upsample-256to128-x8", "upsample-64to32-x2",
                                  # with lengths: zero past each item's output length, skipped tiles
                                  "upsample-32to16-x4-lengths", "upsample-256to128-x8-lengths",
                                  "upsample-64to32-x2-lengths"])
def test_upsample_matches_conv_transpose(results, case):
    # the decoder's upsampling layers as one polyphase kernel: same shape, same values as PyTorch
    _, r = results
    got = r[case]
    assert got["err"] <= TOL[got["dtype"]] * max(1.0, got["scale"]), got


def test_postconv_pcm_matches_pytorch(results):
    # the decoder's last convolution, tanh, mask and int16 conversion in one kernel: the same samples
    # as PyTorch's ops up to one int16 step (fp32, CPU) or one fp16 rounding step (~16 steps, CUDA)
    device, r = results
    got = r["postconv-pcm"]
    assert got["tail"] == 0, got  # nothing past an item's length
    assert got["max_step"] <= (1 if device == "cpu" else 16) and got["share_off"] < 0.05, got


def test_fused_decoder_pcm_matches_plain(results):
    # Generator(..., pcm_scale=): the fused path's int16 against the plain path's
    device, r = results
    got = r["decoder-fused-pcm-vs-plain"]
    assert got["dtype"] == "torch.int16" and got["tail"] == 0, got
    # fp32 on CPU: the float outputs agree to ~1e-6, but truncation to int16 turns that into whole
    # steps wherever a sample sits on a step boundary (1.6e-4 measured here)
    assert got["rel_l2"] <= (1e-3 if device == "cpu" else 2e-2), got


def test_fused_decoder_keeps_padding_out(results):
    # samples past an item's length are exactly 0, and an item padded in a batch equals it alone
    _, r = results
    assert r["decoder-fused-tail-zero"]["err"] == 0.0
    assert r["decoder-fused-padding-independent"]["rel_l2"] <= 1e-3, r["decoder-fused-padding-independent"]


def test_decoders_the_kernel_does_not_fit_are_refused(voice):
    # a decoder with 256-channel resblocks (upsample_initial_channel 512, as larger Piper voices have)
    # stays on cuDNN: the kernel was only run for 16-128 channels
    import dataclasses

    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.modules import Generator
    from engines.tools.weights import onnx_state_and_hparams

    _, hp = onnx_state_and_hparams(voice.model_path)
    ours = Generator(VitsHParams.from_dict(hp))
    assert ours.fused_supported()
    wide = Generator(dataclasses.replace(VitsHParams.from_dict(hp), upsample_initial_channel=512))
    assert not wide.fused_supported()
    with pytest.raises(ValueError, match="16-128 channels"):
        wide.use_fused_resblocks()
