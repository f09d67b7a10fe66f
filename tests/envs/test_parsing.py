"""Tool-call parsing (docs/cases.md C09, C13) including property-based tests."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gym_envfactory.envs.parsing import ParseError, ToolCall, parse_action

ARGS = {"city": "Oslo", "nights": 3, "guests": [{"name": "Ada"}]}


def test_openai_message_with_string_arguments():
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": json.dumps(ARGS)}},
        {"id": "c2", "type": "function", "function": {"name": "book", "arguments": {"x": 1}}}]}
    p = parse_action(msg)
    assert [(c.name, c.arguments, c.id) for c in p.calls] == [("search", ARGS, "c1"), ("book", {"x": 1}, "c2")]
    assert p.errors == [] and p.content == ""


def test_double_encoded_arguments_equal_object_form():
    once = json.dumps(ARGS)
    twice = json.dumps(once)
    forms = [ARGS, once, twice]
    parsed = [parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": a}}]}).calls[0].arguments for a in forms]
    assert parsed[0] == parsed[1] == parsed[2] == ARGS


def test_scalar_strings_stay_strings():
    p = parse_action('<tool_call>{"name": "f", "arguments": {"nights": "42"}}</tool_call>')
    assert p.calls[0].arguments == {"nights": "42"}


def test_malformed_arguments_is_typed_parse_error_not_empty_call():
    p = parse_action({"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{bad"}}]})
    assert p.calls == []
    assert len(p.errors) == 1 and p.errors[0].name == "f" and "not valid JSON" in p.errors[0].message
    assert p.attempted_calls


def test_hermes_blocks_with_think_two_calls_in_order():
    raw = ('<think>I should call get_hotels twice. <tool_call>{"name": "evil", "arguments": {}}</tool_call></think>'
           '<tool_call>{"name": "get_hotels", "arguments": {"city": "Oslo"}}</tool_call>\n'
           '<tool_call>{"name": "get_hotels", "arguments": {"city": "Lima"}}</tool_call>')
    p = parse_action(raw)
    assert [(c.name, c.arguments["city"]) for c in p.calls] == [("get_hotels", "Oslo"), ("get_hotels", "Lima")]
    assert "evil" in p.reasoning and all(c.name != "evil" for c in p.calls)


def test_broken_block_yields_one_error_and_other_call_survives():
    raw = ('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
           '<tool_call>{"name": "b", "arguments": {"x": </tool_call>')
    p = parse_action(raw)
    assert [type(i) for i in p.items] == [ToolCall, ParseError]
    assert p.calls[0].name == "a" and p.errors[0].name == "b"


def test_tag_text_inside_arguments_is_data():
    args = {"note": "say </tool_call> and <think> literally"}
    p = parse_action(f"<tool_call>{json.dumps({'name': 'f', 'arguments': args})}</tool_call>")
    assert p.errors == [] and p.calls[0].arguments == args


def test_bare_closing_think_and_plain_json_call():
    p = parse_action('reasoning here</think>\n```json\n{"name": "f", "arguments": {"a": 1}}\n```')
    assert p.reasoning.startswith("reasoning") and p.calls[0].arguments == {"a": 1}


def test_plain_text_is_a_reply():
    p = parse_action("Your total is 10. Anything else?")
    assert p.items == [] and p.content == "Your total is 10. Anything else?" and not p.attempted_calls


def test_json_list_of_calls_and_parameters_key():
    p = parse_action('[{"name": "a", "parameters": {"x": 1}}, {"name": "b", "arguments": "{}"}]')
    assert [(c.name, c.arguments) for c in p.calls] == [("a", {"x": 1}), ("b", {})]


def test_typed_calls_and_bad_types():
    assert parse_action(ToolCall("a", {"x": 1})).calls[0].arguments == {"x": 1}
    assert parse_action([{"name": "a", "arguments": {}}, ToolCall("b")]).calls[1].name == "b"
    assert isinstance(parse_action(42).items[0], ParseError)
    assert isinstance(parse_action({"foo": 1}).items[0], ParseError)
    p = parse_action({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})
    assert isinstance(p.items[0], ParseError) and "name" in p.items[0].message
    p = parse_action({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1, 2]"}}]})
    assert "object" in p.errors[0].message


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20),
                         st.floats(allow_nan=False, allow_infinity=False, width=32))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=10)
arguments = st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=4)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=4), think=st.text(max_size=30))
def test_property_every_encoding_parses_to_same_calls(calls, think):
    think = think.replace("<", "").replace(">", "")
    hermes = f"<think>{think}</think>" + "".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)
    openai_msg = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)]}
    double = {"role": "assistant", "tool_calls": [
        {"function": {"name": n, "arguments": json.dumps(json.dumps(a))}} for n, a in calls]}
    expected = [(n, a) for n, a in calls]
    for action in (hermes, openai_msg, double, [{"name": n, "arguments": a} for n, a in calls]):
        p = parse_action(action)
        assert p.errors == []
        assert [(c.name, c.arguments) for c in p.calls] == expected


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=50), st.integers(), st.lists(st.text(max_size=5), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)))
def test_property_never_raises(action):
    p = parse_action(action)
    assert all(isinstance(i, (ToolCall, ParseError)) for i in p.items)
