"""The LLM client: an async client for any OpenAI-compatible chat-completions endpoint (import name
``gym_envfactory.llm.client``; the names are also importable from :mod:`gym_envfactory.llm`).  EnvGen,
QueryGen, the tool graph's refinement and the LLM user simulator (:mod:`gym_envfactory.users.llm`) all call
models through it.  Needs the ``openai``, ``tenacity`` and ``jsonschema`` packages (extra ``llm``; ``gen``
and ``synthesis`` include them).

What it adds to the official ``openai`` client (used with ``max_retries=0``; the retrying is done here):

- **Retries** with exponential backoff (``tenacity``) on 408/409/429, 5xx, timeouts and connection
  errors, up to ``max_retries`` retries; a ``Retry-After`` header (seconds, capped at 60) is honoured.
  Any other 4xx raises :class:`LLMRequestError` at once.
- **Structured output**: with ``json_schema`` the reply text is parsed as JSON (```json fences and prose
  around the value are tolerated) and validated with ``jsonschema``; on failure ONE repair round is sent
  (the conversation, the previous answer and the validation error, asking for corrected JSON only); still
  invalid raises :class:`LLMOutputError` carrying the raw text.  The caller's prompt must ask for JSON:
  the messages are sent as given (``LLMConfig.structured_output`` additionally sends the schema as
  ``response_format``, for servers with guided decoding such as vLLM or SGLang).
- **On-disk response cache** (``cache_dir``): the key is the sha256 of canonical JSON of the request
  *without* the endpoint (model, messages, temperature, seed, max_tokens, json_schema, tools, repair round
  index); the value is the raw completion JSON, written atomically (temporary file + rename).  A re-run
  replays from the cache with zero HTTP requests; a run killed mid-way resumes and pays only for the
  requests not yet cached.  Identical concurrent requests are made once.
- **Accounting** per stage: ``usage_by_stage[stage] = {prompt_tokens, completion_tokens, requests,
  cached_hits, repairs, retries}``; tokens and ``requests`` count only paid (non-cached) completions.
- **Concurrency cap**: at most ``max_concurrency`` HTTP requests in flight (an ``asyncio.Semaphore``).

Progress: pass ``progress=callable`` to :class:`LLMClient`; it is called after every reply with a dict
``{"stage", "cached", "repair_round", "prompt_tokens", "completion_tokens"}`` (wire a rich progress bar to
it).  Nothing is printed; diagnostics go to ``logging`` (logger ``gym_envfactory.llm.client``).

The paper's pipeline (arXiv 2605.18703, §3.2) calls an LLM for code, tests and revisions; this module is
the single place those calls go through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from gym_envfactory.errors import LLMError, LLMOutputError, LLMRequestError

__all__ = [
    "LLMConfig",
    "LLMClient",
    "LLMReply",
    "LLMError",
    "LLMRequestError",
    "LLMOutputError",
    "extract_json",
    "cache_key",
    "completion_problem",
    "run",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_RETRY_AFTER_S = 60.0
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "requests", "cached_hits", "repairs", "retries")


# ------------------------------------------------------------------------------------------------ types
@dataclass
class LLMConfig:
    """How to reach the endpoint and sample from it.

    Args:
        model: model id sent to the endpoint (part of the cache key).
        base_url: endpoint base URL, e.g. ``http://127.0.0.1:8000/v1`` (vLLM, SGLang); ``None`` means the
            ``openai`` default (``OPENAI_BASE_URL`` or api.openai.com).  Not part of the cache key.
        api_key_env: environment variable holding the key; ``"EMPTY"`` is sent when it is unset.
        temperature, seed, max_tokens: sampling settings sent with every request (``seed=None`` and
            ``max_tokens=None`` are omitted).
        max_concurrency: HTTP requests in flight at once (>= 1).
        timeout_s: per HTTP request, seconds.
        max_retries: retries after the first attempt on retryable failures.
        cache_dir: folder of the response cache; ``None`` disables caching.
        structured_output: also send the stage's JSON schema as ``response_format`` when a schema is given
            (only for servers that support it; part of the cache key when on): ``True`` or
            ``"json_schema"`` sends the OpenAI form ``{"type": "json_schema", "json_schema": {...}}`` (vLLM,
            SGLang, hosted APIs); ``"json_object"`` sends ``{"type": "json_object", "schema": {...}}``, the
            form llama-cpp-python's server turns into a grammar.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    seed: int | None = 0
    max_concurrency: int = 4
    timeout_s: float = 120.0
    max_retries: int = 4
    cache_dir: str | Path | None = None
    max_tokens: int | None = None
    structured_output: bool | str = False

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("LLMConfig.model must be a non-empty model id")
        if self.max_concurrency < 1:
            raise ValueError(f"LLMConfig.max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"LLMConfig.max_retries must be >= 0, got {self.max_retries}")
        if self.timeout_s <= 0:
            raise ValueError(f"LLMConfig.timeout_s must be > 0, got {self.timeout_s}")


@dataclass
class LLMReply:
    """One answer.

    Attributes:
        text: the assistant message content ("" when the model only called tools).
        data: the parsed, schema-valid JSON value when a ``json_schema`` was given, else ``None``.
        usage: ``{prompt_tokens, completion_tokens, total_tokens}`` summed over the rounds this answer took
            (the repair round included), as reported by the endpoint (also for cached replies).
        cached: True when every round came from the on-disk cache (no HTTP request was made).
        tool_calls: the tool calls in the OpenAI wire format
            ``[{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}]``, or ``None``.
    """

    text: str
    data: Any | None
    usage: dict
    cached: bool
    tool_calls: list | None
    finish_reason: str | None = None
    repaired: bool = False








# ------------------------------------------------------------------------------------------------ helpers
_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\r?\n(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """Parse the JSON value in a model's answer.

    Tries, in order: the whole text; each fenced code block (```json ... ```); the first JSON object or
    array that starts anywhere in the text (so leading and trailing prose is tolerated).

    Raises:
        ValueError: no JSON value found (the message says why).
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("the answer is empty")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE_RE.findall(text):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    first_error: str | None = None
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
                return value
            except json.JSONDecodeError as exc:
                first_error = first_error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    raise ValueError(f"no JSON value found in the answer ({first_error or 'no { or [ in it'})")


def _validation_error(value: Any, schema: dict) -> str | None:
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(validator_cls(schema).iter_errors(value), key=lambda e: (list(e.absolute_path), e.message))
    if not errors:
        return None
    lines = []
    for e in errors[:5]:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        lines.append(f"at {where}: {e.message}")
    if len(errors) > 5:
        lines.append(f"... and {len(errors) - 5} more errors")
    return "; ".join(lines)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(config: LLMConfig, messages: list[dict], *, json_schema: dict | None, tools: list[dict] | None,
              repair_round: int) -> str:
    """The cache key of one request: sha256 (hex) of canonical JSON of everything that determines the answer
    except the endpoint's address (model, messages, temperature, seed, max_tokens, json_schema, tools, the
    repair round index, and ``structured_output`` when on)."""
    payload: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "temperature": config.temperature,
        "seed": config.seed,
        "max_tokens": config.max_tokens,
        "json_schema": json_schema,
        "tools": tools,
        "repair_round": repair_round,
    }
    if config.structured_output:
        payload["structured_output"] = config.structured_output if config.structured_output == "json_object" else True
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    return False


def _retry_after(exc: BaseException | None) -> float | None:
    if not isinstance(exc, openai.APIStatusError):
        return None
    value = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        return None


def run(coro: Awaitable[_T]) -> _T:
    """Run a coroutine to completion from synchronous code (``asyncio.run``)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ client
@dataclass
class _LoopState:
    client: openai.AsyncOpenAI
    semaphore: asyncio.Semaphore
    key_locks: dict[str, asyncio.Lock] = field(default_factory=dict)


class LLMClient:
    """Async chat client with retries, JSON repair, an on-disk cache, a concurrency cap and accounting.

    Args:
        config: :class:`LLMConfig`.
        progress: optional callback called after each reply (see the module docstring).
        backoff_s: first retry wait in seconds; doubles on each retry, capped at ``max_backoff_s``.
        max_backoff_s: cap of one wait.

    One client may be used from several event loops in turn (e.g. successive :func:`run` calls): the HTTP
    client and the semaphore are made per loop.  Call :meth:`aclose` (or use ``async with``) to release the
    connections of the current loop.
    """

    def __init__(self, config: LLMConfig, *, progress: Callable[[dict[str, Any]], None] | None = None,
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0) -> None:
        self.config = config
        self.progress = progress
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.cache_dir = Path(config.cache_dir) if config.cache_dir is not None else None
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._usage: dict[str, dict[str, int]] = {}
        self._loops: dict[int, tuple[asyncio.AbstractEventLoop, _LoopState]] = {}

    # ---------------------------------------------------------------------------------------- accounting
    @property
    def usage_by_stage(self) -> dict[str, dict[str, int]]:
        """``{stage: {prompt_tokens, completion_tokens, requests, cached_hits, repairs, retries}}`` (a copy).
        Tokens and ``requests`` count paid completions only; ``cached_hits`` counts cache replays;
        ``repairs`` counts repair rounds (paid or replayed); ``retries`` counts failed attempts retried."""
        return {stage: dict(counts) for stage, counts in self._usage.items()}

    @property
    def total_usage(self) -> dict[str, int]:
        """The sum of :attr:`usage_by_stage` over stages, same keys."""
        total = dict.fromkeys(_USAGE_KEYS, 0)
        for counts in self._usage.values():
            for k in _USAGE_KEYS:
                total[k] += counts.get(k, 0)
        return total

    def _count(self, stage: str, key: str, n: int = 1) -> None:
        counts = self._usage.setdefault(stage, dict.fromkeys(_USAGE_KEYS, 0))
        counts[key] += n

    # ---------------------------------------------------------------------------------------- per loop
    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        entry = self._loops.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        # forget states of loops that are gone (their connections died with them)
        self._loops = {k: v for k, v in self._loops.items() if not v[0].is_closed()}
        client = openai.AsyncOpenAI(
            api_key=os.environ.get(self.config.api_key_env) or "EMPTY",
            base_url=self.config.base_url,
            timeout=self.config.timeout_s,
            max_retries=0,
        )
        state = _LoopState(client=client, semaphore=asyncio.Semaphore(self.config.max_concurrency))
        self._loops[id(loop)] = (loop, state)
        return state

    async def aclose(self) -> None:
        """Close the HTTP connections opened from the running event loop."""
        loop = asyncio.get_running_loop()
        entry = self._loops.pop(id(loop), None)
        if entry is not None:
            await entry[1].client.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---------------------------------------------------------------------------------------- cache
    def _cache_path(self, key: str) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / key[:2] / f"{key}.json"

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        if self.cache_dir is None:
            return None
        path = self._cache_path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:  # torn by hand: pay again
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None
        problem = completion_problem(data)
        if problem is not None:  # valid JSON of the wrong shape (edited by hand, another tool's file): pay again
            log.warning("ignoring malformed cache entry %s: %s", path, problem)
            return None
        return data

    def _cache_put(self, key: str, completion: dict[str, Any]) -> None:
        if self.cache_dir is None:
            return
        path = self._cache_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(completion, fh, ensure_ascii=False, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ---------------------------------------------------------------------------------------- requests
    def _wait(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        after = _retry_after(exc)
        if after is not None:
            return after
        return min(self.backoff_s * (2 ** (retry_state.attempt_number - 1)), self.max_backoff_s)

    def _request_kwargs(self, messages: list[dict], json_schema: dict | None, tools: list[dict] | None,
                        stage: str) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.config.model, "messages": messages,
                              "temperature": self.config.temperature}
        if self.config.seed is not None:
            kw["seed"] = self.config.seed
        if self.config.max_tokens is not None:
            kw["max_tokens"] = self.config.max_tokens
        if tools:
            kw["tools"] = tools
        if json_schema is not None and self.config.structured_output:
            if self.config.structured_output == "json_object":
                kw["response_format"] = {"type": "json_object", "schema": json_schema}
            else:
                name = re.sub(r"[^A-Za-z0-9_-]", "_", stage)[:64] or "answer"
                kw["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": name, "schema": json_schema}}
        return kw

    async def _post(self, kw: dict[str, Any], stage: str) -> dict[str, Any]:
        state = self._state()
        attempts = 0
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_is_retryable),
                stop=stop_after_attempt(self.config.max_retries + 1),
                wait=self._wait,
                reraise=True,
            ):
                with attempt:
                    attempts += 1
                    if attempts > 1:
                        self._count(stage, "retries")
                    async with state.semaphore:
                        raw = await state.client.chat.completions.with_raw_response.create(**kw)
                    text = raw.text
        except openai.APIStatusError as exc:
            retryable = _is_retryable(exc)
            why = f"after {attempts} attempts" if retryable else "(not retried)"
            raise LLMRequestError(
                f"{stage}: {self.config.base_url or 'default endpoint'} answered HTTP {exc.status_code} {why}: "
                f"{exc.message}", status=exc.status_code, attempts=attempts, stage=stage) from exc
        except openai.APIConnectionError as exc:
            cause = f" {exc.__cause__}" if exc.__cause__ is not None and str(exc.__cause__) else ""  # "Connection refused"
            raise LLMRequestError(
                f"{stage}: no answer from {self.config.base_url or 'default endpoint'} after {attempts} attempts "
                f"({type(exc).__name__}: {exc}{cause}); check base_url and that the server is up",
                attempts=attempts, stage=stage) from exc
        try:
            completion = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LLMRequestError(f"{stage}: the endpoint answered 2xx with a body that is not JSON: {text[:200]!r}",
                                  status=200, attempts=attempts, stage=stage) from exc
        problem = completion_problem(completion)
        if problem is not None:
            raise LLMRequestError(f"{stage}: the endpoint's answer is not a chat completion ({problem}): {text[:200]!r}",
                                  status=200, attempts=attempts, stage=stage)
        return completion

    async def _complete(self, messages: list[dict], *, stage: str, json_schema: dict | None,
                        tools: list[dict] | None, repair_round: int) -> tuple[dict[str, Any], bool]:
        """One round: the completion JSON and whether it came from the cache."""
        key = cache_key(self.config, messages, json_schema=json_schema, tools=tools, repair_round=repair_round)
        if self.cache_dir is None:
            completion = await self._post(self._request_kwargs(messages, json_schema, tools, stage), stage)
            return completion, False
        state = self._state()
        lock = state.key_locks.setdefault(key, asyncio.Lock())
        async with lock:  # identical concurrent requests: the second one reads the first one's answer
            hit = self._cache_get(key)
            if hit is not None:
                return hit, True
            completion = await self._post(self._request_kwargs(messages, json_schema, tools, stage), stage)
            self._cache_put(key, completion)
        state.key_locks.pop(key, None)
        return completion, False

    def _account(self, stage: str, completion: dict[str, Any], cached: bool, repair_round: int) -> dict[str, int]:
        usage = completion.get("usage")
        if not isinstance(usage, dict):
            if usage is not None:
                log.warning("%s: ignoring usage that is not an object: %r", stage, usage)
            usage = {}
        prompt = _token_count(usage.get("prompt_tokens"), stage, "prompt_tokens")
        done = _token_count(usage.get("completion_tokens"), stage, "completion_tokens")
        if cached:
            self._count(stage, "cached_hits")
        else:
            self._count(stage, "requests")
            self._count(stage, "prompt_tokens", prompt)
            self._count(stage, "completion_tokens", done)
        if repair_round:
            self._count(stage, "repairs")
        if self.progress is not None:
            self.progress({"stage": stage, "cached": cached, "repair_round": repair_round,
                           "prompt_tokens": prompt, "completion_tokens": done})
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    async def chat(self, messages: list[dict], *, stage: str, json_schema: dict | None = None,
                   tools: list[dict] | None = None) -> LLMReply:
        """Send one chat completion (plus at most one repair round) and return the answer.

        Args:
            messages: OpenAI chat messages (``role``/``content``, tool results, ...), sent as given.
            stage: accounting bucket (e.g. ``"code"``, ``"tests"``, ``"revise"``).
            json_schema: when given, the answer must be JSON valid against it (see the module docstring).
            tools: OpenAI ``tools`` (function definitions) offered to the model.

        Raises:
            LLMRequestError: a non-retryable 4xx, or retries exhausted.
            LLMOutputError: with ``json_schema``, still invalid after the repair round.
        """
        if json_schema is not None:
            try:
                jsonschema.validators.validator_for(json_schema, default=jsonschema.Draft202012Validator) \
                    .check_schema(json_schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"{stage}: json_schema is not a valid JSON Schema: {exc.message}") from exc
        completion, cached = await self._complete(messages, stage=stage, json_schema=json_schema, tools=tools,
                                                  repair_round=0)
        usage = self._account(stage, completion, cached, 0)
        text, tool_calls, finish = _message_of(completion)
        if json_schema is None:
            return LLMReply(text=text, data=None, usage=usage, cached=cached, tool_calls=tool_calls,
                            finish_reason=finish)
        data, error = _parse_and_validate(text, json_schema)
        if error is None:
            return LLMReply(text=text, data=data, usage=usage, cached=cached, tool_calls=tool_calls,
                            finish_reason=finish)
        log.info("%s: answer invalid (%s); sending a repair round", stage, error)
        first_text = text
        repair_messages = [*messages, {"role": "assistant", "content": text},
                           {"role": "user", "content": _repair_prompt(error, json_schema)}]
        completion2, cached2 = await self._complete(repair_messages, stage=stage, json_schema=json_schema,
                                                    tools=tools, repair_round=1)
        usage2 = self._account(stage, completion2, cached2, 1)
        text2, tool_calls2, finish2 = _message_of(completion2)
        data2, error2 = _parse_and_validate(text2, json_schema)
        if error2 is not None:
            raise LLMOutputError(f"{stage}: the answer is not valid JSON for the schema after one repair round: "
                                 f"{error2}", raw=text2, first_raw=first_text, error=error2, stage=stage)
        total = {k: usage[k] + usage2[k] for k in usage}
        return LLMReply(text=text2, data=data2, usage=total, cached=cached and cached2, tool_calls=tool_calls2,
                        finish_reason=finish2, repaired=True)


def completion_problem(completion: Any) -> str | None:
    """Why ``completion`` is not a usable chat completion (``None`` when it is).

    The same check applies to live answers and to cache entries: ``choices`` a non-empty list whose
    first item is an object with a ``message`` object, whose ``content`` is a string or null and whose
    ``tool_calls`` is a list or null; ``usage``, when present, an object.
    """
    if not isinstance(completion, dict):
        return f"expected a JSON object, got {type(completion).__name__}"
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no choices"
    choice = choices[0]
    if not isinstance(choice, dict):
        return "choices[0] is not an object"
    message = choice.get("message")
    if not isinstance(message, dict):
        return "choices[0].message is not an object"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return "choices[0].message.content is not a string"
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return "choices[0].message.tool_calls is not a list"
    if content is None and not calls and not isinstance(message.get("refusal"), str):
        return "choices[0].message has neither content nor tool calls"
    usage = completion.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return "usage is not an object"
    return None


def _token_count(value: Any, stage: str, key: str) -> int:
    """A token count from ``usage``; anything but a non-negative integer counts 0 (with a warning)."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    log.warning("%s: usage.%s is not a token count (%r); counted as 0", stage, key, value)
    return 0


def _message_of(completion: dict[str, Any]) -> tuple[str, list | None, str | None]:
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or None
    return message.get("content") or "", calls, choice.get("finish_reason")


def _parse_and_validate(text: str, schema: dict) -> tuple[Any, str | None]:
    try:
        value = extract_json(text)
    except ValueError as exc:
        return None, str(exc)
    error = _validation_error(value, schema)
    if error is not None:
        return None, f"the JSON does not match the schema: {error}"
    return value, None


def _repair_prompt(error: str, schema: dict) -> str:
    return ("Your previous answer could not be used: " + error + "\n\n"
            "Reply with the corrected JSON only: no explanation, no code fences. It must validate against "
            "this JSON Schema:\n" + json.dumps(schema, indent=1, sort_keys=True))
