"""The fused Triton WN layer of the flow (engines/torch_vits/fused_wn.py) against plain PyTorch.

As in test_fused_conv.py: without a GPU the kernel runs under Triton's CPU interpreter, which
needs ``TRITON_INTERPRET=1`` before Triton is first imported, so the cases run in a child
process (``fused_wn_cases.py``, about 30 s on two cores) and this module checks what it
reports. On a CUDA host the same cases run on the GPU.
"""

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
pytest.importorskip("triton", reason="triton is not installed: pip install triton (the fused flow kernel needs it)")

from tests.engines.kernel_child import run_cases  # noqa: E402
from tests.engines import fused_wn_cases as cases  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results(voice):
    return run_cases(HERE / "fused_wn_cases.py", drop_env=("BOOKTTS_TORCH_FUSED_FLOW",))


@pytest.mark.parametrize("case", [c[0] for c in cases.KERNEL_CASES])
def test_kernel_matches_reference(results, case):
    # the reference does the same float32 arithmetic on the same half-rounded inputs, so only the
    # summation order differs (and the 1x1 convolution as split float16 products, ~2^-22; on the GPU: fast exp)
    device, r = results
    if case not in r:
        pytest.skip(f"{case} is not run on {device}: Triton's CPU interpreter computes bf16 wrongly "
                    "(numpy has no bf16); this case runs on CUDA")
    got = r[case]
    tol = 1e-5 if device == "cpu" else 5e-5
    assert got["err"] <= tol * max(1.0, got["scale"]), got
    assert got["tail"] == 0.0, got  # every output row at or past the item's length is written as exactly 0
    assert got.get("xc_err", 0.0) == 0.0, got  # the next layer's half-precision input is the new stream rounded


def test_fused_flow_matches_plain_fp32(results):
    # the voice's whole flow: Flip folded into the pre/post weights, [B, T, C] layout, 16 kernel launches
    device, r = results
    limit = 1e-5 if device == "cpu" else 1e-4
    assert r["flow-fp32-fused-vs-plain"]["rel_l2"] <= limit, r["flow-fp32-fused-vs-plain"]


def test_fused_flow_fp16_is_no_worse_than_plain_fp16(results):
    # the engine's mixed precision (fp16 in_layers): both sides round the same inputs to fp16; the
    # kernel keeps the convolution's output in fp32 where cuDNN rounds it to fp16, so the fused flow
    # must be at least as close to the all-fp32 flow as the plain one
    _, r = results
    got = r["flow-fp16-fused-vs-plain"]
    assert got["rel_l2"] <= 2e-3, got
    assert got["fused_vs_fp32"] <= 1.1 * got["plain_vs_fp32"] + 1e-6, got


def test_fused_flow_keeps_padding_out(results):
    # samples past an item's length are exactly 0 (as on the plain path), and an item padded in a
    # batch equals it alone (lengths taken from the mask when not given)
    device, r = results
    assert r["flow-fused-tail-zero"]["err"] == 0.0 and r["flow-fused-tail-zero"]["plain"] == 0.0, r
    limit = 1e-6 if device == "cpu" else 1e-5
    assert r["flow-fused-padding-independent"]["rel_l2"] <= limit, r["flow-fused-padding-independent"]


@pytest.mark.parametrize("case", ["prior-f64-noise0.0", "prior-f64-noise0.667", "prior-f30-noise0.0",
                                  "prior-f30-noise0.667"])
def test_stage_b_input_kernel_matches_pytorch(results, case):
    # z_p = m + eps * exp(logs) * noise_scale expanded to frames by the durations, in the flow's [rows, frames, C]
    # layout: the same float32 operations as expand_prior and the engine's noise (exp may differ in its last
    # bit on the GPU); frames past an item's total take m = logs = 0 and noise past its frames 0; padding rows 0
    _, r = results
    got = r[case]
    assert got["err"] <= 1e-6 * max(1.0, got["scale"]) and got["pad_rows_zero"], got


def test_fused_flow_input_in_its_own_layout(results):
    # the engine hands the flow a [B, C, T] view of a [B, T, C] tensor: the flow works in a copy of it unless
    # told it may overwrite it, and gives the same output either way
    _, r = results
    assert r["flow-fused-btc-input"] == {"copy_equal": True, "input_unchanged": True, "overwrite_in_place": True,
                                         "overwrite_equal": True}, r["flow-fused-btc-input"]


def test_engine_switch_runs_the_fused_flow(results):
    # BOOKTTS_TORCH_FUSED_FLOW=1 reaches the engine's stage B (under the interpreter on CPU, fp32):
    # info says so and the int16 audio matches the unfused engine's to one step of rounding
    device, r = results
    if device != "cpu":
        pytest.skip("the engine case runs on CPU only (fp32 under the interpreter)")
    got = r["engine-fused-flow-switch"]
    assert got["on"] is True and got["off"] is False, got
    assert got["same_lengths"] and got["max_int16_diff"] <= 2, got


# ------------------------------------------------------------------ in-process (no kernel launch)


def _flow(hp, **changes):
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.modules import ResidualCouplingBlock

    return ResidualCouplingBlock(dataclasses.replace(VitsHParams.from_dict(hp), **changes))


@pytest.fixture(scope="module")
def voice_hp(voice):
    from engines.tools.weights import onnx_state_and_hparams

    return onnx_state_and_hparams(voice.model_path)[1]


def test_flows_the_kernel_does_not_fit_are_refused(voice_hp):
    # the voice's flow fits; 96 hidden channels (Piper's x_low voices) or a mean-and-scale coupling do not
    assert _flow(voice_hp).fused_supported()
    for changes in ({"flow_hidden_channels": 96}, {"flow_mean_only": False}, {"flow_kernel_size": 4}):
        flow = _flow(voice_hp, **changes)
        assert not flow.fused_supported(), changes
        with pytest.raises(ValueError, match="fused WN kernel"):
            flow.use_fused()


def test_use_fused_off_restores_the_plain_path(voice_hp):
    flow = _flow(voice_hp).use_fused()
    assert flow.fused and flow._fused_plan
    flow.use_fused(False)
    assert not flow.fused and flow._fused_plan is None


def test_wn_layer_refuses_bad_arguments():
    from engines.torch_vits import fused_wn as W

    b, t, h = 1, 8, 192
    x, skip, lengths = torch.zeros(b, t, h), torch.zeros(b, t, h), torch.tensor([t])
    layer = W.pack_layer(torch.zeros(2 * h, h, 5, dtype=torch.float16), torch.zeros(2 * h), torch.ones(2 * h, h, 1),
                         torch.zeros(2 * h), 1)
    with pytest.raises(ValueError, match="x_out must not be x"):  # the taps read rows other programs write
        W.wn_layer(x, layer, lengths, skip, first=True, last=False, x_out=x)
    with pytest.raises(ValueError, match="float32"):  # the stream and the skip sum stay float32
        W.wn_layer(x.half(), layer, lengths, skip, first=True, last=False)
    with pytest.raises(ValueError, match="xc must be x"):  # the convolution's input in the convolution's dtype
        W.wn_layer(x, layer, lengths, skip, first=True, last=False, xc=x)
    narrow = W.pack_layer(torch.zeros(192, 96, 5), torch.zeros(192), torch.ones(192, 96, 1), torch.zeros(192), 1)
    with pytest.raises(ValueError, match="H in"):  # 96 channels: not a multiple of 64
        W.wn_layer(x[..., :96].contiguous(), narrow, lengths, skip[..., :96].contiguous(), first=True, last=False)


def test_res_skip_weight_split_is_near_float32():
    # the 1x1 weight as a power-of-two scale times two float16 halves: about 2^-22 relative
    from engines.torch_vits import fused_wn as W

    g = torch.Generator().manual_seed(0)
    w = torch.randn(384, 192, 1, generator=g) * torch.logspace(-4, 0, 192)[None, :, None]
    p = W.pack_layer(torch.zeros(384, 192, 5), torch.zeros(384), w, torch.zeros(384), 1)
    back = (p["w_hi"].double() + p["w_lo"].double()) * p["w_scale"]
    ref = w[:, :, 0].t().double()
    assert float((back - ref).abs().max() / ref.abs().max()) < 2.0**-22
    assert p["w_hi"].dtype == p["w_lo"].dtype == torch.float16 and p["w_hi"].abs().max() <= 2.0**14


def test_engine_refuses_the_fused_flow_on_cpu_without_the_interpreter(voice, monkeypatch):
    from engines import EngineSpec
    from engines.torch_engine import TorchEngine
    from engines.torch_options import ENV

    FUSED_FLOW_ENV = ENV["fused_flow"]
    from core.errors import EngineUnavailable

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(FUSED_FLOW_ENV, raising=False)
    spec = EngineSpec(name="torch", precision="fp32", device="cpu", max_batch=2)
    assert TorchEngine(voice, spec).info.extra["fused_flow"] is False  # default: only with the fused decoder
    monkeypatch.setenv(FUSED_FLOW_ENV, "1")
    with pytest.raises(EngineUnavailable, match="CUDA"):
        TorchEngine(voice, spec)
