"""The node's shape profile (workers.runtime.shapes_to_record / prepare_shapes): a worker writes the
shapes its engine met to the state directory, and the next engine of the same settings on the node
prepares them before its first batch. The engine side (CUDA graphs captured ahead) is tested in
tests/engines/test_graphs.py; here the worker's side, with an engine stand-in."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engines import EngineSpec
from engines.base import PreparesShapes
from workers import runtime


class ShapedEngine:
    """Implements engines.base.PreparesShapes: reports ``met``, records what it was asked to prepare."""

    def __init__(self, met: dict) -> None:
        self.met, self.asked = met, []

    def shape_profile(self) -> dict:
        return self.met

    def prepare_shapes(self, profile: dict, budget_s: float) -> dict:
        self.asked.append((profile, budget_s))
        return {"captured": len(profile.get("stage_a", [])), "skipped": 0, "seconds": 0.5}


@pytest.fixture
def node(tmp_path, monkeypatch):
    def settings(budget: float):
        monkeypatch.setenv(runtime.STATE_DIR_ENV, str(tmp_path / "state"))
        monkeypatch.setenv(runtime.PREPARE_SHAPES_ENV, repr(budget))
        runtime.reset_for_tests()

    yield settings
    runtime.reset_for_tests()


VOICE = SimpleNamespace(model_path="/voices/en_US-joe-medium.onnx")
SPEC = EngineSpec(name="torch", precision="fp16", device="cuda:0", max_batch=1024)


def test_a_worker_records_the_shapes_and_the_next_engine_prepares_them(node):
    node(45.0)
    first = ShapedEngine({"stage_a": [[64, 32, 5], [8, 96, 1]], "stage_b": [[128, 256, 3]]})
    assert isinstance(first, PreparesShapes)
    assert runtime.prepare_shapes(first, SPEC, VOICE) is None  # a new node: nothing recorded yet
    runtime.shapes_to_record(first, SPEC, VOICE, force=True)()
    second = ShapedEngine({"stage_a": [[64, 32, 2], [16, 64, 7]], "stage_b": []})  # another GPU's worker
    runtime.shapes_to_record(second, SPEC, VOICE, force=True)()
    path = runtime.shapes_path(SPEC, VOICE)
    doc = json.loads(path.read_text())
    assert doc == {"stage_a": [[16, 64, 7], [64, 32, 5], [8, 96, 1]], "stage_b": [[128, 256, 3]]}
    nxt = ShapedEngine({})
    report = runtime.prepare_shapes(nxt, SPEC, VOICE)
    assert nxt.asked == [(doc, 45.0)] and report["captured"] == 3
    # the same settings on another GPU of the node share the profile; other settings do not
    assert runtime.shapes_path(SPEC.__class__(**{**SPEC.__dict__, "device": "cuda:3"}), VOICE) == path
    assert runtime.shapes_path(SPEC.__class__(**{**SPEC.__dict__, "max_batch": 512}), VOICE) != path
    assert "3 recorded shapes prepared in 0.5 s" in runtime.startup_report(
        SimpleNamespace(extra={}), 2.0, report)


def test_recording_is_rate_limited_and_survives_a_damaged_file(node):
    node(45.0)
    eng = ShapedEngine({"stage_a": [[8, 32, 1]], "stage_b": []})
    assert runtime.shapes_to_record(eng, SPEC, VOICE) is not None
    assert runtime.shapes_to_record(eng, SPEC, VOICE) is None  # again within SHAPES_SAVE_EVERY_S
    path = runtime.shapes_path(SPEC, VOICE)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    runtime.shapes_to_record(eng, SPEC, VOICE, force=True)()
    assert json.loads(path.read_text()) == {"stage_a": [[8, 32, 1]], "stage_b": []}


def test_switched_off_neither_records_nor_prepares(node):
    node(0.0)
    eng = ShapedEngine({"stage_a": [[8, 32, 1]], "stage_b": []})
    assert runtime.shapes_to_record(eng, SPEC, VOICE, force=True) is None
    assert runtime.prepare_shapes(eng, SPEC, VOICE) is None and not eng.asked
    assert not runtime.shapes_path(SPEC, VOICE).exists()


def test_a_new_engine_is_not_held_back_by_a_freed_engine_at_the_same_address(node):
    """CI failed once here: the rate limit was keyed by id(), and a new engine that CPython placed
    where a just-freed one had been inherited its last save time."""
    node(45.0)
    reused = 0
    for _ in range(200):
        old = ShapedEngine({"stage_a": [[8, 32, 1]], "stage_b": []})
        runtime.shapes_to_record(old, SPEC, VOICE, force=True)
        address = id(old)
        del old
        new = ShapedEngine({"stage_a": [[8, 32, 1]], "stage_b": []})
        if id(new) == address:
            reused += 1
            assert runtime.shapes_to_record(new, SPEC, VOICE) is not None
    if not reused:
        pytest.skip("CPython never reused a freed engine's address in 200 tries: the case was not met")
