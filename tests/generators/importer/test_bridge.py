"""The importer's runtime bridge, imported directly as a module (and the same text copied into packages)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from gym_envfactory import ToolError
from gym_envfactory.generators.importer import BRIDGE_SOURCE, bridge, bridge_source, import_tool_server
from gym_envfactory.generators.importer.bridge import (
    Anything,
    ImportedServer,
    SharedInstanceGuard,
    StubServer,
    as_tool_error,
    error_code_for,
    error_in,
    load_source,
    registrations,
    run_awaitable,
    write_back,
)
from gym_envfactory.generators.packages import purge_modules
from gym_envfactory.validation import lint_source

FIXTURES = Path(__file__).resolve().parents[2] / "generators/fixtures"


class OutOfStockError(Exception):
    pass


def test_the_bridge_is_a_real_module_and_its_text_is_what_packages_get(tmp_path):
    assert bridge.__name__ == "gym_envfactory.generators.importer.bridge"
    source = Path(bridge.__file__).read_text(encoding="utf-8")
    assert bridge_source() == BRIDGE_SOURCE == source
    assert lint_source(source, "bridge.py") == []  # the copies are linted as environment code
    spec = import_tool_server(FIXTURES / "bookstore_server.py", name="BridgeCopyBookStore", out_dir=tmp_path,
                              register=False, validate=False, probe=False, check_isolation=False,
                              sandbox="process")
    try:
        assert (spec.path / "_bridge.py").read_bytes() == Path(bridge.__file__).read_bytes()
        assert sys.modules["gym_envfactory._envs.BridgeCopyBookStore._bridge"] is not bridge  # a copy of its own
    finally:
        purge_modules("BridgeCopyBookStore")


@pytest.mark.parametrize(("exc", "code"), [
    (KeyError("B-1"), "not_found"),
    (IndexError(3), "not_found"),
    (PermissionError("no"), "forbidden"),
    (ValueError("bad"), "invalid_request"),
    (RuntimeError("odd"), "tool_error"),
    (Exception("plain"), "tool_error"),
    (OutOfStockError("none left"), "out_of_stock"),
])
def test_error_codes_of_domain_exceptions(exc, code):
    assert error_code_for(exc) == code
    err = as_tool_error(exc)
    assert isinstance(err, ToolError) and err.code == code


def test_error_looking_results():
    class Reply(BaseModel):
        error: str | None = None

    assert error_in({"error": "Book B-7 not found"}) == ("Book B-7 not found", "tool_error")
    assert error_in({"error": {"message": "nope", "code": "gone"}}) == ("nope", "gone")
    assert error_in({"success": False, "message": "The cart is empty"}) == ("The cart is empty", "tool_error")
    assert error_in({"status": "failed", "reason": "closed", "error_code": "closed"}) == ("closed", "closed")
    assert error_in('{"error": "as JSON text"}') == ("as JSON text", "tool_error")
    assert error_in("Error: no note N9") == ("Error: no note N9", "tool_error")
    assert error_in(Reply(error="from a model")) == ("from a model", "tool_error")
    for fine in ({"ok": True}, {"error": None}, "deleted", "Errors are rare", 3, None, ["error"], Reply()):
        assert error_in(fine) is None, fine


def test_stub_server_records_every_spelling_of_a_registration():
    mcp = StubServer("x")

    @mcp.tool
    def bare() -> None: ...

    @mcp.tool()
    def called() -> None: ...

    @mcp.tool("renamed")
    def positional() -> None: ...

    @mcp.tool(name="kw", description="given")
    def keyword() -> None: ...

    def added() -> None: ...

    mcp.add_tool(added)
    mcp.add_tool(Anything())  # stand-ins are not tools
    mcp.resource("x://y")(bare)  # everything else is a transparent no-op
    assert [(r.name, r.description) for r in mcp.registrations] == [
        ("bare", None), ("called", None), ("renamed", None), ("kw", "given"), ("added", None)]


def test_load_source_stubs_fastmcp_and_the_guard_refuses_the_shared_instance(tmp_path):
    src = tmp_path / "tiny_server.py"
    src.write_text(
        "from pydantic import BaseModel\nfrom mcp.server.fastmcp import FastMCP, Context\n\n\n"
        "class S(BaseModel):\n    n: int = 0\n\n\n"
        "class API:\n    def __init__(self):\n        self.n = 0\n\n"
        "    def load_scenario(self, s):\n        self.n = S(**s).n\n\n"
        "    def save_scenario(self):\n        return {'n': self.n}\n\n"
        "    def bump(self, by):\n        if by < 0:\n            raise ValueError('by must be >= 0')\n"
        "        self.n += by\n        return self.n\n\n\n"
        "api = API()\nmcp = FastMCP('tiny')\n\n\n"
        "@mcp.tool()\nasync def bump(by: int, ctx: Context = None) -> int:\n    return api.bump(by)\n")
    module = load_source("bridge_test_tiny_server", src)
    try:
        assert isinstance(module.mcp, StubServer) and [r.name for r in registrations(module)] == ["bump"]
        server = ImportedServer(module, api_class="API", instances=("api",), state_model="S",
                                context_params={"bump": ("ctx",)})
        assert isinstance(module.api, SharedInstanceGuard)
        with pytest.raises(RuntimeError, match="shared module-level instance 'api'"):
            module.api.bump(1)
        state = module.S(n=1)
        assert server.call(state, "bump", {"by": 2}) == 3 and state.n == 3  # async wrapper, state written back
        with pytest.raises(ToolError, match="by must be >= 0") as err:
            server.call(state, "bump", {"by": -1})
        assert err.value.code == "invalid_request" and state.n == 3  # a failing call writes nothing
    finally:
        sys.modules.pop("bridge_test_tiny_server", None)


def test_write_back_and_run_awaitable():
    class M(BaseModel):
        a: int = 0
        b: list[int] = []

    state, new = M(), M(a=2, b=[1])
    write_back(state, new)
    assert state == new and state.model_fields_set == {"a", "b"}

    async def answer() -> int:
        return 42

    assert run_awaitable(answer()) == 42

    async def inside_a_running_loop() -> int:
        return run_awaitable(answer())  # runs in a helper thread

    assert asyncio.run(inside_a_running_loop()) == 42
