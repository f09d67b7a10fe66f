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


def test_a_subprocess_server_gets_a_fresh_token_when_none_is_given(monkeypatch):
    """Issue 25, finding 3: as the docker backend's, a subprocess backend's server requires a fresh random
    token (its loopback port is open to every local user); the backend itself holds it."""
    import json
    import urllib.error
    import urllib.request

    from gym_envfactory.backends.pool import acquire_backend
    from gym_envfactory.environment.catalog import get_environment

    monkeypatch.delenv("ENVFACTORY_TOKEN", raising=False)
    backend = acquire_backend("subprocess", envs=["PersonalFinance"])
    try:
        url = backend.url
        assert url.startswith("http://127.0.0.1:")
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}).encode()
        req = urllib.request.Request(url + "/v1/rpc", data=ping, method="POST", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        assert refused.value.code == 401
        spec = get_environment("PersonalFinance")
        session = backend.create_session([spec], {}, spec.tasks.ids()[0])
        assert session.state() is not None
        session.close()
    finally:
        backend.release()
