"""The remote backends' client (``backends/remote.py``): what it sends as its client id and how a bad
one is reported."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("value", ["trainer 1", "x" * 129, "é"])
def test_a_bad_client_id_is_named_not_reported_as_a_token_problem(monkeypatch, value):
    from gym_envfactory.backends.remote import process_client_id
    from gym_envfactory.errors import BackendError

    monkeypatch.setenv("ENVFACTORY_CLIENT", value)
    with pytest.raises(BackendError, match="ENVFACTORY_CLIENT"):
        process_client_id()
    monkeypatch.setenv("ENVFACTORY_CLIENT", "trainer-1")
    assert process_client_id() == "trainer-1"
