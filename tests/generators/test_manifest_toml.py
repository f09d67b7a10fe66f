"""``Manifest.to_toml()`` is symmetric with loading: the one manifest writer of EnvGen and the importer."""

from __future__ import annotations

import datetime as dt
import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gym_envfactory.environment.manifest import DOMAINS, Manifest, Provenance
from gym_envfactory.environment.package import load_environment
from gym_envfactory.generators.packages import purge_modules


def reload(m: Manifest) -> Manifest:
    return Manifest.model_validate(tomllib.loads(m.to_toml()))


def test_round_trip_with_lists_and_provenance_extra_fields():
    m = Manifest(
        name="BookStore", version="1.2.3-rc.1", domain="commerce",
        description='A "quoted" description\nover two lines, with a tab\t, a backslash \\ and unicode: café ✓',
        state_model="state:BookStoreScenario", tools_module="tools", default_initial_state="large",
        bookkeeping_fields=["orders.*.created_at", "next_order_number"], free_text_fields=["orders.*.note"],
        set_fields=["cart"],
        provenance=Provenance(kind="imported", source="/srv/book store/server.py", sha256="ab" * 32,
                              api_class="BookStoreAPI", importer="gym_envfactory.generators.importer",
                              attempts=3, score=0.75, passed=True, tags=["a", "b c"], limits={"max": 2, "odd key": "x"},
                              **{"odd key": "needs quoting", "x.y": [1, 2.5, "z", [True]]}),
    )
    again = reload(m)
    assert again == m
    assert again.provenance.model_extra == m.provenance.model_extra
    assert list(again.provenance.model_extra) == list(m.provenance.model_extra)  # order kept too
    text = m.to_toml()
    assert text.index("name = ") < text.index("[provenance]") < text.index('kind = "imported"')


def test_defaults_and_none_values_are_left_out_and_load_back_equal():
    m = Manifest(name="Tiny", version="0.1.0", domain="utilities", description="d",
                 provenance=Provenance(kind="generated", model=None, date="2025-01-02"))
    text = m.to_toml()
    assert "\nmodel =" not in text and "bookkeeping_fields" not in text
    assert 'state_model = "state:State"' in text and 'default_initial_state = "small"' in text
    assert reload(m) == m
    assert reload(Manifest(name="Bare", version="0.0.1", domain="travel", description="")) == Manifest(
        name="Bare", version="0.0.1", domain="travel", description="")


def test_special_values_round_trip():
    when = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
    m = Manifest(name="Odd", version="0.1.0", domain="office", description="\x7f\x00\x1f control",
                 provenance=Provenance(kind="generated", when=when, day=dt.date(2025, 1, 1), at=dt.time(12, 30),
                                       big=2**63 - 1, small=-(2**63), inf=math.inf, tiny=5e-324, exp=1e16))
    again = reload(m)
    assert again == m and again.description == "\x7f\x00\x1f control"
    nan = reload(Manifest(name="Nan", version="0.1.0", domain="office", description="",
                          provenance=Provenance(x=math.nan)))
    assert math.isnan(nan.provenance.model_extra["x"])


@pytest.mark.parametrize("bad", [[None], {"k": None}, 2**64, object()])
def test_values_toml_cannot_hold_are_refused(bad):
    m = Manifest(name="Bad", version="0.1.0", domain="office", description="", provenance=Provenance(v=bad))
    with pytest.raises(ValueError):
        m.to_toml()


def test_written_manifest_loads_as_a_package(tmp_path):
    folder = tmp_path / "TomlCounter"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "state.py").write_text("from pydantic import BaseModel\n\n\nclass State(BaseModel):\n    n: int = 0\n")
    (folder / "tools.py").write_text("from gym_envfactory import tool\n\nfrom .state import State\n\n\n"
                                     "@tool(read_only=True)\ndef get(state: State) -> int:\n    'The count.'\n"
                                     "    return state.n\n")
    (folder / "initial_states").mkdir()
    (folder / "initial_states" / "small.json").write_text("{}")
    m = Manifest(name="TomlCounter", version="0.1.0", domain="utilities", description="count",
                 provenance=Provenance(kind="generated", metadata_sha256="0" * 64))
    (folder / "environment.toml").write_text(m.to_toml(), encoding="utf-8")
    try:
        assert load_environment(folder).manifest == m
    finally:
        purge_modules("TomlCounter")


_text = st.text(st.characters(codec="utf-8"), max_size=20)
_key = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)
_scalar = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), _text,
                    st.floats(allow_nan=False), st.dates())
_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(_key, inner, max_size=3)), max_leaves=8)
_reserved = {"kind", "model", "date", "source"}


@settings(max_examples=150, deadline=None)
@given(
    description=_text,
    fields=st.lists(_text, max_size=3),
    kind=st.sampled_from(["hand-written", "generated", "imported", "programmatic"]),
    model=st.none() | _text,
    extra=st.dictionaries(_key.filter(lambda k: k not in _reserved), _value, max_size=4),
    domain=st.sampled_from(DOMAINS),
)
def test_round_trip_property(description, fields, kind, model, extra, domain):
    m = Manifest(name="Prop", version="0.1.0", domain=domain, description=description, bookkeeping_fields=fields,
                 set_fields=fields[:1], provenance=Provenance(kind=kind, model=model, **extra))
    assert reload(m) == m
