"""Environments the protocol adapters are also checked on (issue 28, "Done when"): one written by EnvGen
(the plant-nursery fixtures answered by a scripted chat server, as tests/generators/envgen/test_envgen.py
does) and one imported from a tool server (tests/generators/fixtures/counter_server.py, its shared globals
replaced by state-derived ids as in tests/generators/importer/test_importer.py), with a task.  Needs the
``gen`` and ``mcp`` extras (the LLM client, FastMCP for the imported server's source)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gym_envfactory.testing import ScriptedChatServer

FIX = Path(__file__).resolve().parents[1] / "generators" / "fixtures"

#: (environment, task) the tests play on each built environment.
GENERATED = ("PlantNurseryProto", "order-monstera")
IMPORTED = ("TicketsProto", "open-two")

TICKET_TASKS = [{"task_id": "open-two", "turns": [
    {"user": "Open a ticket titled 'printer jam'.", "ground_truth": [{"name": "open_ticket", "arguments": {"title": "printer jam"}}]},
    {"user": "And one titled 'no coffee', then list them all.",
     "ground_truth": [{"name": "open_ticket", "arguments": {"title": "no coffee"}}, {"name": "list_tickets", "arguments": {}}],
     "expected_outputs": ["T-2"]}]}]


def build_generated(out: Path) -> str:
    """EnvGen writes, validates and registers :data:`GENERATED`'s environment under ``out``."""
    from gym_envfactory.generators.envgen import EnvGen, EnvGenJob, EnvGenOptions
    from gym_envfactory.generators.prompts import STAGE_MARK
    from gym_envfactory.llm import LLMConfig

    code = json.loads((FIX / "envgen_plant_nursery_code.json").read_text())
    code.pop("notes", None)
    code["state_py"] = (FIX / "envgen_plant_nursery_state.py").read_text()
    code["tools_py"] = (FIX / "envgen_plant_nursery_tools.py").read_text()
    answers = {"code": code, "test": json.loads((FIX / "envgen_plant_nursery_tests.json").read_text())}

    def respond(body: dict) -> dict:
        stage = body["messages"][0]["content"].split("\n", 1)[0][len(STAGE_MARK):]
        return {"content": json.dumps(answers[stage])}

    metadata = json.loads((FIX / "envgen_plant_nursery_metadata.json").read_text())
    with ScriptedChatServer(respond) as server:
        options = EnvGenOptions(out_dir=out / "catalog", quarantine_dir=out / "quarantine", checkpoint_dir=out / "ckpt")
        config = LLMConfig(model="scripted", base_url=server.base_url, api_key_env="ENVGEN_TEST_KEY", max_retries=0,
                           cache_dir=options.checkpoint_dir / "cache")
        [res] = asyncio.run(EnvGen(config, options).generate_many([EnvGenJob(metadata=metadata, name=GENERATED[0])]))
    assert res.status == "passed", res
    return GENERATED[0]


def build_imported(out: Path) -> str:
    """The importer turns the counter tool server into :data:`IMPORTED`'s environment under ``out``."""
    from gym_envfactory.generators.importer import import_tool_server

    src = (FIX / "counter_server.py").read_text()
    src = src.replace("_ids = itertools.count(1)\nAUDIT: List[str] = []\n", "")
    src = src.replace('tid = f"T-{next(_ids)}"\n        AUDIT.append(title)', 'tid = f"T-{len(self.tickets) + 1}"')
    src = src.replace('"audit_size": len(AUDIT)', '"title": title')
    server = out / "tickets_server.py"
    server.write_text(src)
    import_tool_server(server, name=IMPORTED[0], out_dir=out / "imported", tasks=TICKET_TASKS, sandbox="process")
    return IMPORTED[0]
