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
- :class:`OpenAIPolicy` asks any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted)
  with the episode's messages and tool schemas; the key comes from an environment variable.

All randomness comes from a ``random.Random(seed)`` owned by the policy.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import os
import random
from typing import TYPE_CHECKING, Any

from gym_envfactory.envs.env import ground_truth_reply
from gym_envfactory.envs.parsing import ToolCall
from gym_envfactory.errors import PolicyError

if TYPE_CHECKING:  # pragma: no cover
    from gym_envfactory.envs.env import EnvFactoryEnv

__all__ = ["Policy", "OraclePolicy", "NoisyPolicy", "RandomPolicy", "OpenAIPolicy", "make_policy", "PolicyError"]

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


class OpenAIPolicy(Policy):
    """Any OpenAI-compatible chat-completions endpoint with tools (OpenAI API "Chat Completions").

    Args:
        model: model name served by the endpoint.
        base_url: e.g. ``http://localhost:8000/v1`` (vLLM/SGLang) or a hosted API.
        api_key_env: environment variable holding the key (default ``OPENAI_API_KEY``; a placeholder
            is used when unset, as local servers ignore it).
        temperature, seed, max_tokens, timeout (s), max_retries: passed to the client/request.

    Raises:
        PolicyError: the request failed after the client's retries.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, seed: int | None = 0, max_tokens: int | None = 1024,
                 timeout: float = 60.0, max_retries: int = 3) -> None:
        super().__init__()
        try:
            import openai
        except ImportError as exc:  # the optional extra
            raise ValueError("the openai policy needs the 'openai' extra: pip install '.[openai]' in the checkout "
                             "(or pip install openai==3.57.0)") from exc

        self.model = model
        self.base_url = base_url or "the OpenAI default endpoint"
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self._openai = openai
        self.client = openai.OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                                    timeout=timeout, max_retries=max_retries)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}

    @staticmethod
    def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            m = {k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")}
            if m["role"] == "assistant" and not m.get("content") and m.get("tool_calls"):
                m["content"] = None
            out.append(m)
        return out

    def act(self, env: EnvFactoryEnv) -> Any:
        """One chat completion over the episode's messages and tools (OpenAI API "Chat Completions",
        ``tools``); returns the assistant message as a dict (``content``, ``tool_calls``) and adds its
        token counts to ``usage``.

        Raises:
            PolicyError: the request failed after the client's retries, or returned no choices.
        """
        kwargs: dict[str, Any] = {"model": self.model, "messages": self._wire_messages(env.messages),
                                  "tools": env.tools, "temperature": self.temperature}
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        try:
            resp = self.client.chat.completions.create(**kwargs)
        except self._openai.OpenAIError as exc:
            raise PolicyError(f"chat completion at {self.base_url} failed: {type(exc).__name__}: {exc} "
                              "(is the server running and serving this model?)") from exc
        self.usage["requests"] += 1
        if resp.usage is not None:
            self.usage["prompt_tokens"] += resp.usage.prompt_tokens or 0
            self.usage["completion_tokens"] += resp.usage.completion_tokens or 0
        if not resp.choices:
            raise PolicyError("chat completion returned no choices")
        msg = resp.choices[0].message
        out: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
        if msg.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in msg.tool_calls
            ]
        return out


def make_policy(kind: str, *, seed: int = 0, noise: float = 0.3, model: str | None = None,
                base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY") -> Policy:
    """Build a policy by name (``oracle``, ``noisy``, ``random``, ``openai``).  Raises ValueError."""
    if kind == "oracle":
        return OraclePolicy()
    if kind == "noisy":
        return NoisyPolicy(p=noise, seed=seed)
    if kind == "random":
        return RandomPolicy(seed=seed)
    if kind == "openai":
        if not model:
            raise ValueError("--policy openai needs --model")
        return OpenAIPolicy(model=model, base_url=base_url, api_key_env=api_key_env, seed=seed)
    raise ValueError(f"unknown policy {kind!r}; choose oracle, noisy, random or openai")
