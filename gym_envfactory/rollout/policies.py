"""Reference policies for ``envfactory rollout``: oracle, noisy, random and OpenAI-compatible.

A policy maps the episode so far to the next assistant action::

    policy.begin(env)              # after env.reset(); env is the unwrapped EnvFactoryEnv
    action = policy.act(env)       # any action EnvFactoryEnv.step accepts

- :class:`OraclePolicy` replays the task's ground truth (one call per step, then a reply carrying the
  turn's expected outputs; a question on clarification turns).  It scores 1.0 on every valid task.
- :class:`NoisyPolicy` perturbs the oracle with probability ``p`` per call: drop, duplicate, wrong
  argument, malformed JSON, or an early write (a write from a later turn, or a guessed write on a
  clarification turn).  Every perturbation is recorded in ``policy.perturbations`` for the report.
- :class:`RandomPolicy` samples tools and schema-valid arguments (values drawn from the state).
- :class:`OpenAIPolicy` asks any OpenAI-compatible chat-completions endpoint (vLLM, SGLang,
  llama-cpp-python, hosted) with the episode's messages and tool schemas, natively (``tools``) or
  rendered into the system prompt (``tool_format="prompt"``); the key comes from an environment variable.

All randomness comes from a ``random.Random(seed)`` owned by the policy.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import logging
import os
import random
from typing import TYPE_CHECKING, Any

from gym_envfactory.envs.env import ground_truth_reply
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.errors import PolicyError

if TYPE_CHECKING:  # pragma: no cover
    from gym_envfactory.envs.env import EnvFactoryEnv

__all__ = ["Policy", "OraclePolicy", "NoisyPolicy", "RandomPolicy", "OpenAIPolicy", "make_policy", "PolicyError",
           "TOOL_FORMATS", "native_messages", "prompt_messages"]

log = logging.getLogger(__name__)




class Policy:
    """Base class.  ``name`` labels reports; ``perturbations`` lists what a policy did on purpose."""

    name = "policy"

    def __init__(self) -> None:
        self.perturbations: list[str] = []

    def begin(self, env: EnvFactoryEnv) -> None:
        """Prepare for the episode ``env`` has just reset to (the unwrapped env); clears ``perturbations``."""
        self.perturbations = []

    def act(self, env: EnvFactoryEnv) -> Any:  # pragma: no cover - interface
        """The next assistant action for ``env`` (any action :meth:`EnvFactoryEnv.step` accepts)."""
        raise NotImplementedError


def _reply_text(env: EnvFactoryEnv, turn: int) -> str:
    assert env.task is not None
    return ground_truth_reply(env.task.turns[turn])


class OraclePolicy(Policy):
    """Replays ground truth: each call of the current turn in order, then a closing reply."""

    name = "oracle"

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[Any] = []
        self._turn = -1

    def begin(self, env: EnvFactoryEnv) -> None:
        """Start a new episode: forget the previous one's plan."""
        super().begin(env)
        self._turn = -1
        self._queue = []

    def _plan(self, env: EnvFactoryEnv, turn: int) -> list[Any]:
        assert env.task is not None
        plan: list[Any] = [ToolCall(c.name, dict(c.arguments)) for c in env.task.turns[turn].ground_truth]
        return plan + [_reply_text(env, turn)]

    def act(self, env: EnvFactoryEnv) -> Any:
        """The next ground-truth :class:`ToolCall` of the current turn, then its closing reply (text);
        ``"Done."`` past the last turn."""
        if env.turn != self._turn:
            assert env.task is not None
            self._turn = env.turn
            self._queue = self._plan(env, env.turn) if env.turn < len(env.task.turns) else ["Done."]
        return self._queue.pop(0) if self._queue else "Done."


class NoisyPolicy(OraclePolicy):
    """The oracle with perturbations of probability ``p`` per ground-truth call (see module doc)."""

    name = "noisy"
    KINDS = ("drop", "duplicate", "wrong_argument", "malformed", "early_write")

    def __init__(self, p: float = 0.3, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError("p must be in [0, 1]")
        self.p = p
        self.rng = random.Random(seed)

    def _mutate(self, args: dict[str, Any], masked: list[str]) -> dict[str, Any] | None:
        keys = sorted(k for k in args if k not in masked)
        if not keys:
            return None
        out = copy.deepcopy(args)
        key = self.rng.choice(keys)
        v = out[key]
        if isinstance(v, bool):
            out[key] = not v
        elif isinstance(v, int):
            out[key] = v + self.rng.choice([-2, -1, 1, 2])
        elif isinstance(v, float):
            out[key] = round(v * 1.5 + 1, 2)
        elif isinstance(v, str):
            out[key] = v[:-1] + ("9" if v[-1:] != "9" else "8") if v else "x"
        elif isinstance(v, list) and v:
            out[key] = v[:-1]
        else:
            return None
        return out

    def _plan(self, env: EnvFactoryEnv, turn: int) -> list[Any]:
        assert env.task is not None
        task = env.task
        plan: list[Any] = []
        for c in task.turns[turn].ground_truth:
            call = ToolCall(c.name, dict(c.arguments))
            if self.rng.random() >= self.p:
                plan.append(call)
                continue
            kind = self.rng.choice(self.KINDS)
            if kind == "drop":
                self.perturbations.append(f"t{turn}:drop {c.name}")
            elif kind == "duplicate":
                plan += [call, ToolCall(c.name, dict(c.arguments))]
                self.perturbations.append(f"t{turn}:duplicate {c.name}")
            elif kind == "wrong_argument":
                m = self._mutate(call.arguments, c.masked_arguments)
                if m is None:
                    plan.append(call)
                    continue
                plan.append(ToolCall(c.name, m))
                self.perturbations.append(f"t{turn}:wrong_argument {c.name}")
            elif kind == "malformed":
                plan.append(f'<tool_call>{{"name": "{c.name}", "arguments": {{broken</tool_call>')
                plan.append(call)
                self.perturbations.append(f"t{turn}:malformed {c.name}")
            else:  # early write: a write from a later turn now
                assert env.session is not None
                tools = env.session.tools
                later = [g for t in task.turns[turn + 1:] for g in t.ground_truth
                         if g.name in tools and not tools[g.name].read_only]
                if later:
                    g = later[0]
                    plan += [ToolCall(g.name, dict(g.arguments)), call]
                    self.perturbations.append(f"t{turn}:early_write {g.name}")
                else:
                    plan.append(call)
        if task.turns[turn].clarification and self.rng.random() < self.p:
            later = [g for t in task.turns[turn + 1:] for g in t.ground_truth]
            if later:
                g = later[0]
                plan.append(ToolCall(g.name, dict(g.arguments)))
                self.perturbations.append(f"t{turn}:guessed_call {g.name} on clarification turn")
        return plan + [_reply_text(env, turn)]


def _collect_strings(obj: Any, out: set[str], limit: int = 4000) -> None:
    if len(out) >= limit:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and len(k) < 40:
                out.add(k)
            _collect_strings(v, out, limit)
    elif isinstance(obj, list):
        for v in obj:
            _collect_strings(v, out, limit)
    elif isinstance(obj, str) and len(obj) < 40:
        out.add(obj)


class RandomPolicy(Policy):
    """Uniformly random tools with schema-valid arguments (strings drawn from the state's values),
    0–3 calls per turn, then a reply.  A floor for comparisons, not a sensible agent."""

    name = "random"

    def __init__(self, seed: int = 0, max_calls_per_turn: int = 3) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.max_calls = max_calls_per_turn
        self._left = 0
        self._turn = -1
        self._strings: list[str] = []

    def begin(self, env: EnvFactoryEnv) -> None:
        """Collect the short strings of the initial state (keys and values) to draw arguments from."""
        super().begin(env)
        assert env.session is not None
        s: set[str] = set()
        _collect_strings(env.session.state(), s)
        self._strings = sorted(s) or ["x"]
        self._turn = -1

    def _value(self, schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> Any:
        if "$ref" in schema:
            return self._value(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth)
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        if "const" in schema:
            return schema["const"]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                opts = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
                return self._value(self.rng.choice(opts), defs, depth)
        t = schema.get("type")
        if t == "integer":
            lo = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
            return self.rng.randint(int(lo), int(schema.get("maximum", lo + 5)))
        if t == "number":
            return round(self.rng.uniform(schema.get("minimum", 0), schema.get("maximum", 500)), 2)
        if t == "boolean":
            return self.rng.random() < 0.5
        if t == "array":
            if depth > 2:
                return []
            return [self._value(schema.get("items", {}), defs, depth + 1) for _ in range(self.rng.randint(1, 2))]
        if t == "object":
            props = schema.get("properties", {})
            req = set(schema.get("required", []))
            return {k: self._value(v, defs, depth + 1) for k, v in props.items() if k in req or self.rng.random() < 0.3}
        fmt = schema.get("format")
        if fmt == "date":
            return (_dt.date(2026, 12, 1) + _dt.timedelta(days=self.rng.randint(-5, 60))).isoformat()
        if fmt == "date-time":
            return (_dt.datetime(2026, 12, 1, 9) + _dt.timedelta(hours=self.rng.randint(-48, 24 * 40))).isoformat()
        return self.rng.choice(self._strings)

    def act(self, env: EnvFactoryEnv) -> Any:
        """A random :class:`ToolCall` with schema-valid arguments while this turn's budget (0 to
        ``max_calls_per_turn`` calls, drawn per turn) lasts, then a text reply."""
        if env.turn != self._turn:
            self._turn = env.turn
            self._left = self.rng.randint(0, self.max_calls)
        if self._left <= 0:
            return "Here is what I found."
        self._left -= 1
        assert env.session is not None
        tools = list(env.session.tools.values())
        t = self.rng.choice(tools)
        schema = t.input_schema
        args = self._value({k: v for k, v in schema.items() if k != "$defs"}, schema.get("$defs", {}))
        return ToolCall(t.name, args)


#: The tool formats of :class:`OpenAIPolicy`: ``native`` sends ``tools`` (the endpoint's own function
#: calling); ``prompt`` renders them into the system message and lets the gym parse the model's text.
TOOL_FORMATS = ("native", "prompt")

#: The tools block ``tool_format="prompt"`` appends to the system message (the Hermes / Qwen2.5 chat
#: template's wording; ``{tools}`` is one JSON tool schema per line).
PROMPT_TOOLS_TEMPLATE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)

_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _call_text(call: dict[str, Any]) -> str:
    """One OpenAI tool call as a Hermes ``<tool_call>`` block (arguments decoded when they are JSON)."""
    fn = call.get("function", {})
    args: Any = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass  # a malformed call stays as the model wrote it
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def prompt_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's messages for an endpoint without native tool support (Hermes / Qwen style).

    ``tools`` (OpenAI schemas) go into the system message (:data:`PROMPT_TOOLS_TEMPLATE`; a system
    message is added when there is none); an assistant message becomes its text as generated (its
    ``raw`` field when the env kept one, else its content followed by a ``<tool_call>`` block per call);
    consecutive tool results become one user message of ``<tool_response>`` blocks.  Only ``role`` and
    ``content`` (a string) are sent.
    """
    out: list[dict[str, Any]] = []
    block = PROMPT_TOOLS_TEMPLATE.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools)) if tools else ""
    rest = messages
    if messages and messages[0]["role"] == "system":
        system = str(messages[0].get("content") or "")
        rest = messages[1:]
    else:
        system = ""
    if system or block:
        out.append({"role": "system", "content": "\n\n".join(x for x in (system, block) if x)})
    after_tool = False
    for m in rest:
        role = m["role"]
        if role == "tool":
            text = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if after_tool:
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text})
            after_tool = True
            continue
        after_tool = False
        if role == "assistant":
            if isinstance(m.get("raw"), str):
                text = m["raw"]
            else:
                calls = m.get("tool_calls") or []
                text = "\n".join(x for x in [str(m.get("content") or "")] + [_call_text(c) for c in calls] if x)
            out.append({"role": "assistant", "content": text})
            continue
        out.append({"role": role, "content": str(m.get("content") or "")})
    return out


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's messages in the chat-completions wire format (OpenAI API "Chat Completions").

    Only the standard keys are sent (the env's ``raw`` / ``parsed_tool_calls`` stay local; with
    ``history="raw"`` the parsed calls are sent as ``tool_calls`` so the tool results have their call);
    a tool message carries no ``name``; an assistant message with tool calls carries ``"content": ""``,
    never ``null`` (llama-cpp-python answers HTTP 500 to a null content).
    """
    out = []
    for m in messages:
        w = {k: m[k] for k in _WIRE_KEYS if k in m and not (m["role"] == "tool" and k == "name")}
        if m["role"] == "assistant":
            if "tool_calls" not in w and m.get("parsed_tool_calls"):
                w["tool_calls"] = m["parsed_tool_calls"]
            if w.get("content") is None:
                w["content"] = ""
        out.append(w)
    return out


def _endpoint_message(exc: Any) -> str:
    """The error message an endpoint put in its answer (OpenAI ``{"error": {"message"}}``, FastAPI
    ``{"detail"}``, or the raw body), else the client's message."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            if body.get(key):
                v = body[key]
                return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        return json.dumps(body, ensure_ascii=False)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return str(getattr(exc, "message", exc))


class OpenAIPolicy(Policy):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI API "Chat Completions"): vLLM, SGLang,
    llama-cpp-python, hosted APIs.

    Every request sends ``max_tokens`` and, with tools, ``tool_choice: "auto"`` (llama.cpp's
    function-calling chat formats ignore the tools without it); assistant messages with tool calls go
    out with ``"content": ""`` (see :func:`native_messages`).  With ``tool_format="prompt"`` no ``tools``
    are sent: they are rendered into the system message Hermes / Qwen style (:func:`prompt_messages`)
    and the model's text is returned as the action, parsed by the gym
    (:mod:`gym_envfactory.envs.parsing`), for endpoints without native tool support.

    Args:
        model: model name served by the endpoint.
        base_url: e.g. ``http://localhost:8000/v1`` (vLLM/SGLang) or a hosted API.
        api_key_env: environment variable holding the key (default ``OPENAI_API_KEY``; a placeholder
            is used when unset, as local servers ignore it).
        temperature, seed: sampling settings sent with each request (``seed=None``: not sent).
        max_tokens: completion tokens per request (≥ 1), always sent.
        timeout: seconds per request attempt (connect and read).
        max_retries: the client's retries of a failed request (connection errors, 408/409/429/5xx).
        tool_format: ``"native"`` (default) or ``"prompt"`` (see above).

    Raises:
        ValueError: a bad option, or the ``openai`` extra is missing.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, seed: int | None = 0, max_tokens: int = 1024,
                 timeout: float = 60.0, max_retries: int = 3, tool_format: str = "native") -> None:
        super().__init__()
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format must be native or prompt, not {tool_format!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, not {max_tokens!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, not {timeout!r}")
        try:
            import openai
        except ImportError as exc:  # the optional extra
            raise ValueError("the openai policy needs the 'openai' extra: pip install -e '.[openai]' in the checkout "
                             "(or pip install openai==3.57.0)") from exc

        self.model = model
        self.base_url = base_url or "the OpenAI default endpoint"
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.tool_format = tool_format
        self._openai = openai
        self.client = openai.OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                                    timeout=timeout, max_retries=max_retries)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}

    @staticmethod
    def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return native_messages(messages)

    def request(self, env: EnvFactoryEnv) -> dict[str, Any]:
        """The keyword arguments of the chat-completions request for ``env``'s episode so far."""
        tools = env.tools  # the current turn's (a task may add tools at a turn)
        kwargs: dict[str, Any] = {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.tool_format == "prompt":  # turn 0's tools in the system message; later ones in system notes
            kwargs["messages"] = prompt_messages(env.messages, env.opening_tools)
        else:
            kwargs["messages"] = native_messages(env.messages)
            if tools:
                kwargs["tools"] = tools
                kwargs["tool_choice"] = "auto"
        if self.seed is not None:
            kwargs["seed"] = self.seed
        return kwargs

    def _failure(self, exc: Exception) -> PolicyError:
        o = self._openai
        where = f"chat completion at {self.base_url}"
        if isinstance(exc, o.APITimeoutError):
            msg = (f"{where}: no answer within {self.timeout:g} s ({self.max_retries} retries); raise the "
                   "timeout or lower max_tokens")
        elif isinstance(exc, o.APIConnectionError):
            cause = exc.__cause__ or exc
            msg = f"{where} failed: cannot connect: {cause} (is the server running?)"
        elif isinstance(exc, o.APIStatusError):
            msg = f"{where} failed: the endpoint answered HTTP {exc.status_code}: {_endpoint_message(exc)}"
            if exc.status_code == 404:
                msg += f" (does it serve the model {self.model!r}?)"
            elif exc.status_code in (401, 403):
                msg += f" (check the key in ${self.api_key_env})"
        else:
            msg = f"{where} failed: {type(exc).__name__}: {exc}"
        return PolicyError(msg)

    def act(self, env: EnvFactoryEnv) -> Any:
        """One chat completion over the episode's messages and tools (see :meth:`request`); adds its
        token counts to ``usage``.  Returns the assistant message as a dict (``content``,
        ``tool_calls``), or with ``tool_format="prompt"`` the model's text (a raw string the env parses).

        Raises:
            PolicyError: the request failed after the client's retries (the message is the endpoint's
                own for an HTTP error; a connection failure asks whether the server runs), or the answer
                had no choices.
        """
        try:
            resp = self.client.chat.completions.create(**self.request(env), timeout=self.timeout)
        except self._openai.OpenAIError as exc:
            raise self._failure(exc) from exc
        self.usage["requests"] += 1
        if resp.usage is not None:
            self.usage["prompt_tokens"] += resp.usage.prompt_tokens or 0
            self.usage["completion_tokens"] += resp.usage.completion_tokens or 0
        if not resp.choices:
            raise PolicyError(f"chat completion at {self.base_url} returned no choices")
        msg = getattr(resp.choices[0], "message", None)
        if msg is None:
            raise PolicyError(f"chat completion at {self.base_url} returned a choice without a message")
        content = msg.content if isinstance(msg.content, str) else ""
        calls = msg.tool_calls
        if calls is not None and not isinstance(calls, list):
            raise PolicyError(f"chat completion at {self.base_url} returned tool_calls that are not a list")
        if self.tool_format == "prompt" and not calls:
            return content
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            out["tool_calls"] = [_tool_call_dict(c, i) for i, c in enumerate(calls)]
        return out


def _tool_call_dict(call: Any, index: int) -> dict[str, Any]:
    """An endpoint's tool call as the env reads it.  A call of another type (``custom``) or without a
    function keeps whatever name/arguments it has (none: ``""``), so the env turns it into an invalid
    call the model sees: a malformed model action is an observation, never a crash."""
    fn = getattr(call, "function", None)
    name = getattr(fn, "name", None)
    args = getattr(fn, "arguments", None)
    if not isinstance(args, str):
        try:
            args = json.dumps(args) if args is not None else ""
        except (TypeError, ValueError):
            args = ""
    call_id = getattr(call, "id", None)
    return {"id": call_id if isinstance(call_id, str) and call_id else f"call_{index}", "type": "function",
            "function": {"name": name if isinstance(name, str) else "", "arguments": args}}


def make_policy(kind: str, *, seed: int = 0, noise: float = 0.3, model: str | None = None,
                base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", tool_format: str = "native",
                max_tokens: int = 1024, timeout: float = 60.0) -> Policy:
    """Build a policy by name (``oracle``, ``noisy``, ``random``, ``openai``); ``model``, ``base_url``,
    ``api_key_env``, ``tool_format``, ``max_tokens`` and ``timeout`` (seconds per request) configure
    :class:`OpenAIPolicy`.  Raises ValueError."""
    if kind == "oracle":
        return OraclePolicy()
    if kind == "noisy":
        return NoisyPolicy(p=noise, seed=seed)
    if kind == "random":
        return RandomPolicy(seed=seed)
    if kind == "openai":
        if not model:
            raise ValueError("--policy openai needs --model")
        return OpenAIPolicy(model=model, base_url=base_url, api_key_env=api_key_env, seed=seed,
                            tool_format=tool_format, max_tokens=max_tokens, timeout=timeout)
    raise ValueError(f"unknown policy {kind!r}; choose oracle, noisy, random or openai")
