"""jobs/batching.py without Redis, files or an engine: what joins an engine call, how a call splits.
(Packing units when a job is planned: tests/jobs/test_plan.py.)"""

import pytest

from jobs.batching import fill_call, group_by_scales, halve, run_order

SHAPES = {"a": (4, 10), "b": (8, 10), "c": (2, 50), "d": (1, 10)}


def test_a_call_takes_in_order_each_unit_that_fits_its_capacity():
    chosen, rest = fill_call("abcd", SHAPES.get, items=2, longest=10, max_items=8, max_padded=200)
    # a: 6 items x 10 = 60; b: 14 items, over 8; c: 8 items x 50 = 400, over 200; d: 7 x 10 = 70
    assert chosen == [("a", 4, 10), ("d", 1, 10)]
    assert rest == ["b", "c"], "what did not fit stays offered, in order"


def test_padded_ids_count_every_utterance_at_the_longest():
    # the call holds 4 utterances of 100 ids: one more short one pads to 100 too (5 x 100 > 450)
    chosen, rest = fill_call(["s"], lambda c: (1, 10), items=4, longest=100, max_items=64, max_padded=450)
    assert chosen == [] and rest == ["s"]
    # a long unit taken first widens the call for those after it
    shapes = {"long": (1, 100), "short": (3, 10)}
    chosen, rest = fill_call(["long", "short"], shapes.get, items=1, longest=10, max_items=64, max_padded=300)
    assert [c for c, _, _ in chosen] == ["long"] and rest == ["short"], "2 x 100 fits, 5 x 100 does not"
    chosen, _ = fill_call(["short", "long"], shapes.get, items=1, longest=10, max_items=64, max_padded=300)
    assert [c for c, _, _ in chosen] == ["short"], "4 x 10 fits; then 5 x 100 does not"


def test_a_unit_passed_by_is_neither_chosen_nor_offered_again():
    chosen, rest = fill_call("ab", lambda c: None if c == "a" else (1, 5), items=0, longest=0,
                             max_items=8, max_padded=100)
    assert chosen == [("b", 1, 5)] and rest == []


def test_a_full_call_takes_nothing():
    chosen, rest = fill_call("ad", SHAPES.get, items=8, longest=10, max_items=8, max_padded=10_000)
    assert chosen == [] and rest == ["a", "d"]


def test_a_call_out_of_memory_splits_in_two():
    assert halve([1, 2, 3, 4, 5]) == ([1, 2], [3, 4, 5])
    assert halve(["x", "y"]) == (["x"], ["y"])


def test_a_call_splits_by_scales_in_order_of_first_appearance():
    groups = group_by_scales(["slow", "fast", "slow", "mid", "fast"])
    assert list(groups) == ["slow", "fast", "mid"]
    assert groups == {"slow": [0, 2], "fast": [1, 4], "mid": [3]}


def test_a_local_run_takes_units_by_plan_or_chapter_by_chapter():
    pending = [0, 1, 2, 3, 4, 5]
    chapters = [[4, 0], [0, 2, 5], [1]]  # unit 0 spans chapters 1 and 2; unit 3 is in no delivered chapter
    assert run_order(pending, chapters, "plan") == pending
    assert run_order(pending, chapters, "chapters") == [0, 4, 2, 5, 1, 3]
    assert run_order([5, 1], chapters, "chapters") == [5, 1], "only the pending ones, each once"
    with pytest.raises(ValueError, match="plan, chapters"):
        run_order(pending, chapters, "random")
