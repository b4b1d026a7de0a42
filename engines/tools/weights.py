"""Weights of a Piper VITS voice for the PyTorch port: read from ONNX, write/read safetensors.

A Piper ``.onnx`` file carries every weight the inference graph needs as an
initializer. Most initializers keep their PyTorch state-dict names
(``enc_p.encoder.attn_layers.0.conv_q.weight``); weights the exporter folded
(weight-norm, the flow's WN convolutions) carry generated names such as
``onnx::Conv_8168``. Both are mapped here to state-dict names through the node
that consumes them: input 1/2 of node ``/flow/flows.6/enc/in_layers.0/Conv`` is
``flow.flows.6.enc.in_layers.0.weight``/``.bias``; input 0 of the embedding
``Gather`` is ``enc_p.emb.weight``; the duration predictor's folded
``exp(-logs)`` constant of its ElementwiseAffine flow is turned back into
``dp.flows.0.logs``.

The hyper-parameters that are not visible in weight shapes (upsampling strides,
resblock dilations, the flow's dilation rate) are read from the Conv and
ConvTranspose node attributes; everything else is derived from shapes by
:func:`engines.torch_vits.hparams.hparams_from_state_dict`.

:func:`export_weights` writes the mapped weights as one safetensors file with the
voice config and hyper-parameters in its metadata, so the PyTorch engine can run
on a host that has neither the ONNX file nor piper-tts (a GPU node).

This module imports no torch: ``numpy``, ``onnx`` (reading ONNX only) and
``safetensors`` (writing/reading safetensors only).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from core.errors import InputError, VoiceError
from core.files import sha256_file as _sha256
from core.voice import WEIGHTS_FORMAT, open_weights

#: Version of the metadata layout written by :func:`export_weights`.
FORMAT_VERSION = "1"

_DTYPES = {"fp32": np.float32, "fp16": np.float16}

#: Weights always stored in float32: the text encoder and the duration predictor (stage A) run in
#: float32 at every precision, and the encoder is sensitive to weight rounding: fp16-rounded
#: encoder weights alone move the audio by ~3% (relative L2), flow ~0.2%, decoder ~0.05%.
FP32_PREFIXES = ("enc_p.", "dp.")

_STATE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$")


def _load_onnx(onnx_path):
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the host
        raise VoiceError("reading voice weights from an ONNX file needs the onnx package; pip install onnx, "
                         "or pass the exported weights as the voice (--voice PATH.safetensors, from export-weights)") from exc
    path = Path(onnx_path)
    if not path.is_file():
        raise VoiceError(f"voice model {path} does not exist; pass an existing .onnx file")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and friends
        raise VoiceError(f"{path} is not a readable ONNX model ({type(exc).__name__}); reinstall the voice") from exc


def _module_of(node_name: str) -> str:
    """``/flow/flows.6/enc/in_layers.0/Conv`` -> ``flow.flows.6.enc.in_layers.0``."""
    parts = [p for p in node_name.split("/") if p]
    return ".".join(parts[:-1])


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _graph_state_dict(model) -> tuple[dict[str, np.ndarray], dict]:
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    state: dict[str, np.ndarray] = {}
    conv_attrs: dict[str, dict] = {}

    def take(init_name: str, key: str, transform=None) -> None:
        arr = numpy_helper.to_array(inits[init_name])
        if transform is not None:
            arr = transform(arr)
        state[key] = np.ascontiguousarray(arr.astype(np.float32, copy=False))

    consumed: set[str] = set()
    for node in graph.node:
        module = _module_of(node.name)
        if node.op_type in ("Conv", "ConvTranspose") and module:
            conv_attrs[module] = dict(_attrs(node), op=node.op_type)
            for idx, suffix in ((1, "weight"), (2, "bias")):
                if len(node.input) > idx and node.input[idx] in inits:
                    take(node.input[idx], f"{module}.{suffix}")
                    consumed.add(node.input[idx])
        elif node.op_type == "Gather" and module.endswith(".emb") and node.input[0] in inits:
            take(node.input[0], f"{module}.weight")
            consumed.add(node.input[0])
        elif node.op_type == "Mul" and re.fullmatch(r"dp\.flows\.\d+", module):
            # ElementwiseAffine in reverse: (x - m) * exp(-logs); the exporter folded exp(-logs).
            for name in node.input:
                if name in inits and name.endswith("Exp_output_0"):
                    take(name, f"{module}.logs", lambda a: -np.log(a))
                    consumed.add(name)
    # Initializers that kept their state-dict names and were not consumed by a Conv/Gather above
    # (attention relative embeddings, layer norms, the ElementwiseAffine mean).
    for name, init in inits.items():
        if name in consumed or not _STATE_KEY.match(name) or name in state:
            continue
        take(name, name)
    return state, conv_attrs


def _hparams_from_attrs(state: dict[str, np.ndarray], conv_attrs: dict) -> dict:
    """The hyper-parameters not visible in shapes, read from the convolution nodes."""
    hp: dict = {}
    ups = sorted((k for k in conv_attrs if re.fullmatch(r"dec\.ups\.\d+", k)), key=lambda k: int(k.rsplit(".", 1)[1]))
    if ups:
        hp["upsample_rates"] = [int(conv_attrs[k]["strides"][0]) for k in ups]
        hp["upsample_kernel_sizes"] = [int(state[f"{k}.weight"].shape[-1]) for k in ups]
    dil = []
    i = 0
    while f"dec.resblocks.{i}.convs.0" in conv_attrs or f"dec.resblocks.{i}.convs1.0" in conv_attrs:
        first = "convs" if f"dec.resblocks.{i}.convs.0" in conv_attrs else "convs1"
        j, d = 0, []
        while f"dec.resblocks.{i}.{first}.{j}" in conv_attrs:
            d.append(int(conv_attrs[f"dec.resblocks.{i}.{first}.{j}"]["dilations"][0]))
            j += 1
        dil.append(d)
        i += 1
    if dil:
        hp["resblock_dilations"] = dil
    first_flow = next((k for k in conv_attrs if re.fullmatch(r"flow\.flows\.\d+\.enc\.in_layers\.1", k)), None)
    if first_flow is not None:
        hp["flow_dilation_rate"] = int(conv_attrs[first_flow]["dilations"][0])
    return hp


def onnx_state_and_hparams(onnx_path) -> tuple[dict[str, np.ndarray], dict]:
    """State dict (float32 numpy) and full hyper-parameters of a Piper VITS ONNX file."""
    from engines.torch_vits.hparams import hparams_from_state_dict

    model = _load_onnx(onnx_path)
    state, conv_attrs = _graph_state_dict(model)
    try:
        hp = hparams_from_state_dict(state, _hparams_from_attrs(state, conv_attrs))
    except (KeyError, ValueError, IndexError) as exc:
        raise VoiceError(f"{onnx_path} does not look like a Piper VITS voice ({exc}); use a Piper .onnx voice") from exc
    return state, hp.to_dict()


def onnx_to_state_dict(onnx_path) -> dict[str, np.ndarray]:
    """The PyTorch state dict (name -> float32 array) of a Piper VITS ``.onnx`` file."""
    return onnx_state_and_hparams(onnx_path)[0]




def export_weights(voice, out_path, dtype: str = "fp16") -> Path:
    """Write the voice's weights as safetensors (``fp16`` or ``fp32``), atomically; return the path.

    ``fp16`` stores the flow and the decoder (stage B, ~9M parameters) in float16 and keeps
    the encoder and duration predictor (:data:`FP32_PREFIXES`) in float32: ~45 MB for the
    medium voice instead of 63 MB.

    ``voice`` is a :class:`core.voice.VoiceConfig` or a voice name/path for
    :func:`core.voice.resolve_voice`. The file's metadata holds ``format``,
    ``format_version``, ``dtype``, ``sample_rate``, ``hop_length``,
    ``source_sha256`` (of the ONNX file), ``source_name``, ``hparams`` (JSON)
    and ``piper_config`` (the voice's ``.onnx.json``), so that
    :func:`core.voice.voice_from_weights` can rebuild the voice description without the
    ONNX file.
    """
    from core.voice import VoiceConfig, resolve_voice

    if dtype not in _DTYPES:
        raise InputError(f"unknown weight dtype {dtype!r}; choose fp16 or fp32")
    out = Path(out_path).expanduser()
    if out.suffix != ".safetensors":
        raise InputError(f"output {out} must end in .safetensors")
    if out.is_dir():
        raise InputError(f"output {out} is a directory; give a file name ending in .safetensors")
    if not out.parent.is_dir():
        raise InputError(f"output directory {out.parent} does not exist; create it first")
    if not isinstance(voice, VoiceConfig):
        voice = resolve_voice(voice)
    if not str(voice.model_path).endswith(".onnx"):
        raise VoiceError(f"voice {voice.name!r} has no ONNX file to export from ({voice.model_path})")
    try:
        from safetensors.numpy import save_file
    except ImportError as exc:  # pragma: no cover
        raise VoiceError("exporting weights needs the safetensors package; pip install safetensors") from exc

    state, hp = onnx_state_and_hparams(voice.model_path)
    np_dtype = _DTYPES[dtype]
    tensors = {k: np.ascontiguousarray(v.astype(np.float32 if k.startswith(FP32_PREFIXES) else np_dtype))
               for k, v in sorted(state.items())}
    metadata = {
        "format": WEIGHTS_FORMAT,
        "format_version": FORMAT_VERSION,
        "dtype": dtype,
        "fp32_prefixes": ",".join(FP32_PREFIXES),
        "sample_rate": str(voice.sample_rate),
        "hop_length": str(voice.hop_length),
        "source_sha256": _sha256(Path(voice.model_path)),
        "source_name": str(voice.name),
        "hparams": json.dumps(hp, sort_keys=True),
        "piper_config": Path(voice.config_path).read_text(encoding="utf-8"),
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=str(out.parent))
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, out)
    except OSError as exc:
        raise InputError(f"cannot write {out} ({exc.strerror or exc}); check the directory is writable") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def read_weights(path) -> tuple[dict[str, np.ndarray], dict, dict]:
    """Read an exported safetensors file: (state dict in its stored dtype, hparams, metadata)."""
    from engines.torch_vits.hparams import hparams_from_state_dict

    meta, state = open_weights(path, tensors=True)
    try:
        hp = hparams_from_state_dict(state, json.loads(meta.get("hparams", "{}"))).to_dict()
    except (KeyError, ValueError, IndexError) as exc:
        raise VoiceError(f"{path} holds no usable Piper VITS weights ({exc}); export it again") from exc
    return state, hp, meta
