"""Batch limits a job gets when the command line does not set them: they follow the engine's device."""

import click
import pytest
from click.testing import CliRunner

from engines import EngineSpec
from commands.options import engine_options, job_options
from jobs.config import (
    CPU_MAX_BATCH,
    DEFAULT_MAX_BATCH_PHONEMES,
    GPU_MAX_BATCH,
    GPU_MAX_BATCH_PHONEMES,
    batch_defaults,
)


@click.command()
@engine_options
@job_options
def probe(config, engine_spec):
    click.echo(f"{config.max_batch} {config.max_batch_phonemes} {engine_spec.max_batch}")


@pytest.mark.parametrize("args, want", [
    ([], (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)),  # the CPU default: batching buys little there
    (["--engine", "torch", "--device", "cuda:0"], (GPU_MAX_BATCH, GPU_MAX_BATCH_PHONEMES)),
    (["--engine", "tensorrt", "--device", "cuda:1"], (GPU_MAX_BATCH, GPU_MAX_BATCH_PHONEMES)),
    (["--engine", "torch", "--device", "cpu"], (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)),
    # an explicit setting wins on any device
    (["--engine", "torch", "--device", "cuda:0", "--max-batch", "64"], (64, GPU_MAX_BATCH_PHONEMES)),
    (["--max-batch", "8", "--max-batch-phonemes", "999"], (8, 999)),
], ids=["cpu-default", "cuda-torch", "tensorrt", "torch-on-cpu", "cuda-explicit-batch", "cpu-explicit-both"])
def test_batch_limits_follow_the_engine(args, want):
    res = CliRunner().invoke(probe, args)
    assert res.exit_code == 0, res.output
    batch, phonemes, engine_batch = map(int, res.output.split())
    assert (batch, phonemes) == want
    assert engine_batch == batch  # the engine is built for the batches the job is planned with


def test_batch_defaults_without_engine_are_the_cpu_ones():
    assert batch_defaults(None) == (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)
    assert batch_defaults(EngineSpec(name="onnx", device="cpu")) == (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)


@pytest.mark.parametrize("field,value", [
    ("length_scale", 0), ("length_scale", -5), ("length_scale", float("nan")), ("length_scale", "1"),
    ("noise_scale", -1), ("noise_w", float("inf")), ("sentence_pause_s", -0.1), ("paragraph_pause_s", 1e9),
    ("clause_pause_s", -1), ("title_pause_s", 61), ("max_batch", 0), ("max_batch", 2.5), ("max_batch", True),
    ("max_phonemes", 7), ("max_batch_phonemes", 10**9),
])
def test_job_config_refuses_out_of_range_settings(field, value):
    """A programmatic caller, a job.json or a watch config cannot bypass the CLI's ranges."""
    from jobs.config import LIMITS, JobConfig
    from core.errors import InputError

    with pytest.raises(InputError) as err:
        JobConfig(**{field: value})
    msg = str(err.value)
    assert LIMITS[field].option in msg and repr(value) in msg and "allowed" in msg and "\n" not in msg
    with pytest.raises(InputError):
        JobConfig.from_dict({**JobConfig().to_dict(), field: value})


def test_job_config_limits_allow_the_defaults_and_the_edges():
    from jobs.config import LIMITS, JobConfig

    JobConfig()
    JobConfig(length_scale=None, noise_scale=0, noise_w=0)  # 0 noise: deterministic
    for field, lim in LIMITS.items():
        if field == "max_phonemes":
            JobConfig(max_phonemes=int(lim.hi), max_batch_phonemes=2 * int(lim.hi) + 3)
        elif field != "max_batch_phonemes":
            JobConfig(**{field: lim.hi})
    JobConfig(max_batch_phonemes=803)  # exactly the longest utterance of the default --max-phonemes 400


@pytest.mark.parametrize("args", [["--length-scale", "0"], ["--noise-w", "nan"], ["--threads", "0"],
                                  ["--max-batch-phonemes", "802"]])
def test_options_refuse_out_of_range_values(args):
    res = CliRunner().invoke(probe, args)
    assert res.exit_code == 2, res.output
    assert args[0] in res.output
