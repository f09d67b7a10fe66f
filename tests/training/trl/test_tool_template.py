"""The tokenizer TRL's tool loop gets (:func:`~gym_envfactory.training.trl.tool_chat_template`): SmolLM2's own
template fails TRL's checks; ``CHATML_TOOLS`` with TRL's Hermes parser, and TRL's shipped Qwen2.5 template, pass
them and parse the calls the model writes; ``environment_class(compact=True)`` shortens the prompt, not the
tools (docs/training.md, "TRL: the model and its chat template")."""

from __future__ import annotations

import pytest

from gym_envfactory.training.trl import environment_class, tool_chat_template


@pytest.fixture
def plain_tokenizer():
    """A fresh SmolLM2 tokenizer with its own chat template (no tools)."""
    from tests.training.smollm2 import smollm2_tokenizer

    return smollm2_tokenizer(tool_template=False)


@pytest.mark.parametrize("template", ["chatml_tools", "qwen2_5"])
def test_tool_chat_template_passes_trls_checks_and_parses_calls(plain_tokenizer, template):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    assert not supports_tool_calling(plain_tokenizer)  # SmolLM2's own template: TRL refuses it
    tok = tool_chat_template(plain_tokenizer, template)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert tok.response_template is not None
    tools = [environment_class("HotelBooking").search_hotels]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hotels in Lisbon?"}], tools=tools,
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    for text in ('<tool_call>{"name": "search_hotels", "arguments": {"city": "Lisbon", "guests": "2"}}</tool_call>',
                 '<tool_call>\n{"name": "search_hotels", "arguments": {"city": "Lisbon", "guests": 2}}\n</tool_call>'):
        ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        parsed = parse_response(tok, ids, prefix=prompt, tools=tools)
        assert parsed["tool_calls"] == [{"type": "function", "function": {
            "name": "search_hotels", "arguments": {"city": "Lisbon", "guests": 2}}}]  # typed by the schema


def test_compact_environment_class_shortens_the_prompt_and_keeps_the_tools(plain_tokenizer):
    from transformers.utils import get_json_schema

    from gym_envfactory import get_environment
    from gym_envfactory.training.export.rl import rl_rows

    tok = tool_chat_template(plain_tokenizer, "qwen2_5")
    prompt = rl_rows(["HotelBooking"], split="train")[0]["prompt"]
    names = list(get_environment("HotelBooking").tools)
    full, compact = environment_class("HotelBooking"), environment_class("HotelBooking", compact=True)

    def schemas(cls):
        return [get_json_schema(getattr(cls, n))["function"] for n in names]

    def length(cls):
        return len(tok.apply_chat_template(prompt, tools=[getattr(cls, n) for n in names], add_generation_prompt=True,
                                           tokenize=True, return_dict=False))

    for a, b in zip(schemas(full), schemas(compact), strict=True):
        assert a["name"] == b["name"] and "return" in a and "return" not in b
        assert a["parameters"].get("required") == b["parameters"].get("required")
        assert {k: {f: v for f, v in p.items() if f != "description"} for k, p in a["parameters"]["properties"].items()} \
            == {k: {f: v for f, v in p.items() if f != "description"} for k, p in b["parameters"]["properties"].items()}
        assert len(b["description"]) <= len(a["description"]) and b["description"]
    assert length(compact) < 0.6 * length(full)
