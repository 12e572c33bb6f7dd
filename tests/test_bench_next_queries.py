"""bench/next_queries.py: the rules that spread a new model's next queries over its tasks."""

import numpy as np
import pytest

from bench.next_queries import allocate, overall_gain


def test_overall_gain_is_the_overall_width_one_more_query_removes():
    width = np.array([0.4, 0.4, 0.2, np.nan])
    n = np.array([1.0, 4.0, 2.0, 3.0])
    w = np.array([100.0, 300.0, 50.0, 80.0])
    gain = overall_gain(width, n, w)
    usable = np.isfinite(width)
    scale = w[usable].sum()

    def overall_width(cells):
        return np.sqrt(np.sum((w[usable] * cells[usable]) ** 2)) / scale

    for t in range(3):
        after = width.copy()
        after[t] *= np.sqrt(n[t] / (n[t] + 1))
        assert gain[t] == pytest.approx(overall_width(width) - overall_width(after))
    assert np.isnan(gain[3])  # no interval, no gain
    # the big task wins although its own cell narrows less than the first task's
    cell = width * (1 - np.sqrt(n / (n + 1)))
    assert cell[0] > cell[1] and gain[1] > gain[0]


def test_uniform_spreads_evenly_larger_tasks_first_and_respects_room():
    n = np.full(3, 2.0)
    width = np.array([0.1, 0.5, 0.3])
    w = np.array([10.0, 30.0, 20.0])
    room = np.array([5, 5, 5])
    assert allocate("uniform", n, width, w, 4, room).tolist() == [1, 2, 1]
    assert allocate("uniform", n, width, w, 9, room).tolist() == [3, 3, 3]
    assert allocate("uniform", n, width, w, 9, np.array([1, 5, 5])).tolist() == [1, 4, 4]
    assert allocate("uniform", n, width, w, 99, room).sum() == room.sum()


def test_gain_rules_follow_their_gains_and_shrink_as_they_add():
    n = np.full(2, 1.0)
    room = np.array([50, 50])
    # equal weights: the cell rule sends queries to the wider cell until it has narrowed
    added = allocate("cell gain", n, np.array([0.2, 0.4]), np.ones(2), 6, room)
    assert added[1] > added[0] > 0
    # equal widths: the task-size rule favours the heavier task, but not exclusively
    added = allocate("task size", n, np.array([0.3, 0.3]), np.array([1.0, 2.0]), 10, room)
    assert added[1] > added[0] > 0
    with pytest.raises(ValueError):
        allocate("nonsense", n, np.array([0.3, 0.3]), np.ones(2), 1, room)
