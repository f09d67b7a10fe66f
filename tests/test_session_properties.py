"""Property-based tests (hypothesis) for state equivalence and session state handling."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gym_envfactory import Session
from gym_envfactory.reward import canonical_number, state_diff

scalars = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=6),
                    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3)))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), c, max_size=3),
                      max_leaves=12)
states = st.dictionaries(st.text("abcdef", min_size=1, max_size=4), values, max_size=5)


def canon(x):
    return json.dumps(canonical_number(x), sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(a=states, b=states)
def test_diff_empty_iff_canonically_equal(a, b):
    assert state_diff(a, a) == []
    assert (state_diff(a, b) == []) == (canon(a) == canon(b))


@settings(max_examples=200, deadline=None)
@given(a=states)
def test_ints_and_integral_floats_are_equivalent(a):
    def floatify(x):
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return x
        if isinstance(x, int):
            return float(x)
        if isinstance(x, list):
            return [floatify(v) for v in x]
        if isinstance(x, dict):
            return {k: floatify(v) for k, v in x.items()}
        return x
    assert state_diff(floatify(a), a) == []


@settings(max_examples=200, deadline=None)
@given(a=states, key=st.text("abcdef", min_size=1, max_size=4), v=scalars)
def test_excluded_paths_never_matter_and_others_always_do(a, key, v):
    b = dict(a)
    b[key] = {"changed": v} if canon(a.get(key)) != canon({"changed": v}) else {"changed2": v}
    assert state_diff(a, b, bookkeeping=[key]) == []
    d = state_diff(a, b)
    assert d and all(x.path.split(".")[0] == key for x in d)


CALLS = st.lists(st.one_of(
    st.tuples(st.just("borrow_book"), st.fixed_dictionaries({"book_id": st.sampled_from(["B1", "B2", "B3", "B9"]),
                                                             "member": st.sampled_from(["ada", "bob", "zed"]),
                                                             "days": st.one_of(st.integers(-1, 70), st.just("7"), st.just(2.5))})),
    st.tuples(st.just("return_book"), st.fixed_dictionaries({"loan_id": st.sampled_from(["L-0001", "L-0002", "L-0003"])})),
    st.tuples(st.just("set_fee"), st.fixed_dictionaries({"book_id": st.sampled_from(["B1", "B2"]), "fee": st.one_of(st.integers(-2, 9), st.floats(0, 5))})),
), max_size=12)


@settings(max_examples=120, deadline=None)
@given(prefix=CALLS, suffix=CALLS)
def test_fork_snapshot_restore_and_replay_agree(library, prefix, suffix):
    """Any call sequence: a fork, a restored snapshot and a fresh replay reach byte-identical states,
    and failed calls never change the state."""
    s = Session(library, check_writes=True)
    for name, args in prefix:
        before = s.state_bytes()
        r = s.call(name, args)
        assert r.error_type != "internal_error", r
        if not r.ok:
            assert s.state_bytes() == before
    snap = s.snapshot()
    fork = s.fork()
    restored = Session(library)
    restored.restore(snap)
    for name, args in suffix:
        results = [x.call(name, args) for x in (s, fork, restored)]
        assert len({(r.ok, r.error_type, json.dumps(r.content, sort_keys=True)) for r in results}) == 1
    replay = Session(library)
    for name, args in prefix + suffix:
        replay.call(name, args)
    assert s.state_bytes() == fork.state_bytes() == restored.state_bytes() == replay.state_bytes()
