"""Dynamic sampling's row choice (training/sampling.py) and the paired bootstrap of held-out evaluation
(training/evaluation.py): pure Python, no model."""

from __future__ import annotations

import pytest

from gym_envfactory.training.evaluation import paired_bootstrap
from gym_envfactory.training.sampling import DynamicSampler


def test_sampler_explores_then_prefers_rows_with_signal():
    s = DynamicSampler(4, recheck_after=100, reuse_gap=0, explore_every=0, seed=1)
    first = [s.draw() for _ in range(4)]
    assert sorted(first) == [0, 1, 2, 3]  # every row is tried once before any is repeated
    s.record(first[0], [0.0, 0.0, 0.0])  # flat: hopeless for now
    s.record(first[1], [1.0, 1.0, 1.0])  # flat: solved
    s.record(first[2], [0.0, 1.0, 0.5])  # signal
    s.record(first[3], [0.2, 0.2, 0.2])  # flat in between
    assert s.summary() == {"unplayed": 0, "signal": 1, "flat_zero": 1, "flat_one": 1, "flat_other": 1}
    assert [s.draw() for _ in range(3)] == [first[2]] * 3  # only the row with signal, until cool-downs end
    assert s.stats[first[2]].pass_rate == pytest.approx(0.5)


def test_sampler_spreads_over_signal_rows_and_keeps_exploring():
    s = DynamicSampler(5, recheck_after=3, reuse_gap=1, explore_every=0, seed=0)
    a, b, c = (s.draw() for _ in range(3))
    s.record(a, [0.0, 1.0])
    s.record(b, [0.0, 1.0])
    s.record(c, [0.0, 0.0])
    assert {s.draw(), s.draw()} == {a, b}  # least recently played first: both rows with signal are used
    # without exploration, rows with signal starve the others: the two unplayed rows are never reached
    assert {s.draw() for _ in range(6)} == {a, b}
    s = DynamicSampler(5, recheck_after=3, reuse_gap=1, explore_every=2, seed=0)
    a, b = s.draw(), s.draw()  # draw 1 is an exploring draw; with nothing played yet both explore anyway
    s.record(a, [0.0, 1.0])
    s.record(b, [0.0, 0.0])
    picks = []
    for _ in range(8):
        x = s.draw()
        if x not in (a, b):
            s.record(x, [0.0, 0.0])  # every newly explored row comes back flat
        picks.append(x)
    assert picks[0] == a  # an exploiting draw: the row with signal
    assert len(set(picks) - {a, b}) == 3  # every exploring draw reaches a new row...
    assert b in picks  # ...and, once none is left, the flat row is re-checked after its cool-down


def test_sampler_draw_avoids_excluded_rows_and_refuses_bad_sizes():
    s = DynamicSampler(2, seed=0)
    x = s.draw()
    assert s.draw(exclude=[x]) != x
    with pytest.raises(ValueError):
        DynamicSampler(0)
    with pytest.raises(ValueError):
        DynamicSampler(3, recheck_after=-1)


def test_paired_bootstrap_sees_a_consistent_gain_and_not_noise():
    before = [0.0] * 30 + [0.5] * 30
    after = [0.2] * 30 + [0.5] * 30
    gain = paired_bootstrap(before, after, resamples=2000)
    assert gain["mean_diff"] == pytest.approx(0.1)
    assert gain["lower_95_one_sided"] > 0 and gain["p_not_better"] == 0.0
    assert (gain["better"], gain["worse"], gain["same"]) == (30, 0, 30)
    noise = paired_bootstrap([0.0, 1.0] * 20, [1.0, 0.0] * 20, resamples=2000)
    assert noise["mean_diff"] == 0 and noise["lower_95_one_sided"] < 0 < noise["ci95_high"]
    same = paired_bootstrap([0.3] * 10, [0.3] * 10, resamples=100)
    assert same["lower_95_one_sided"] == 0 and same["p_not_better"] == 1.0


def test_paired_bootstrap_refuses_unpaired_input():
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap([1.0], [0.0], resamples=0)


def test_a_row_drawn_but_never_recorded_is_not_lost_and_one_steps_slots_differ():
    """Review finding: a row drawn and then not recorded (its play raised) left the unplayed list for good."""
    s = DynamicSampler(3, recheck_after=100, reuse_gap=0, explore_every=0, seed=0)
    a, b, c = s.draw(), s.draw(), s.draw()
    assert len({a, b, c}) == 3  # slots of one step, none recorded yet: three different rows
    s.record(b, [0.0, 0.0])
    s.record(c, [1.0, 1.0])
    assert s.draw() == a  # a's play failed: it is still offered as unplayed
