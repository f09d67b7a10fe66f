"""A local OpenAI-compatible chat-completions server that answers from a script, over real HTTP.

For tests and offline demos of code that talks to LLM endpoints (no network, no model)::

    with ScriptedChatServer([{"content": "hi"}]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")

The script is a list of assistant replies (dicts with ``content`` and/or ``tool_calls`` in the OpenAI
wire format; ``tool_calls[i].function.arguments`` may be a dict, it is encoded) consumed in order, or a
callable ``responder(request_json) -> reply dict`` (called on the server's request threads, concurrently and
outside the server's lock, so a responder may sleep; it must be thread-safe itself).  A reply
``{"status": 500}`` makes the server answer with that HTTP error instead; a reply that already is a whole
completion (it has ``choices``, e.g. one captured by :class:`RecordingProxy`) is served verbatim.  A request
with ``"stream": true`` is answered as server-sent events (:func:`stream_chunks`, then ``data: [DONE]``).  Every
request body is kept in ``server.requests``.  Implements ``POST /v1/chat/completions`` and
``GET /v1/models`` (OpenAI API reference).

Record and replay: :class:`RecordingProxy` is an OpenAI-compatible server that forwards each chat
completion to a real upstream endpoint (vLLM, SGLang, a hosted API) and appends
``{"request_sha": request_sha(body), "reply": <completion>}`` to a JSON Lines file;
:meth:`ScriptedChatServer.from_file` serves such a file again (by request hash), or a plain JSON list of
replies in order, with no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["ScriptedChatServer", "ScriptExhausted", "RecordingProxy", "request_sha", "stream_chunks"]


class ScriptExhausted(RuntimeError):
    """More requests arrived than the script has replies."""


Responder = Callable[[dict[str, Any]], dict[str, Any]]


def request_sha(body: dict[str, Any]) -> str:
    """The hash that keys a recorded reply: sha256 (hex) of the request body as canonical JSON (sorted keys,
    no whitespace, UTF-8).  Every field counts (model, messages, tools, temperature, seed, ...)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Replay:
    """Responder over recorded replies: by request hash where entries carry one, else in file order."""

    def __init__(self, entries: list[tuple[str | None, dict[str, Any]]], source: str) -> None:
        self._by_sha: dict[str, deque[dict[str, Any]]] = {}
        self._ordered: deque[dict[str, Any]] = deque()
        for sha, reply in entries:
            if sha is None:
                self._ordered.append(reply)
            else:
                self._by_sha.setdefault(sha, deque()).append(reply)
        self._source = source
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        sha = request_sha(body)
        with self._lock:
            queue = self._by_sha.get(sha)
            if queue:
                return queue.popleft()
            if self._ordered:
                return self._ordered.popleft()
        raise ScriptExhausted(f"{self._source}: no recorded reply for request {sha} (recorded with other "
                              "messages, model or sampling settings, or already replayed)")


def stream_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the ``chat.completion.chunk`` objects a server streams for it (OpenAI API
    reference, "The chat completion chunk object"): the role and content, one chunk per tool call (its whole
    arguments in one delta), then the ``finish_reason`` with the usage."""
    head = {k: completion.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = []
    for choice in completion.get("choices", []):
        message, i = choice.get("message") or {}, choice.get("index", 0)
        chunks.append(head | {"choices": [{"index": i, "delta": {"role": "assistant", "content": message.get("content") or ""},
                                           "finish_reason": None}]})
        for k, call in enumerate(message.get("tool_calls") or []):
            chunks.append(head | {"choices": [{"index": i, "finish_reason": None, "delta": {"tool_calls": [
                {"index": k, "id": call["id"], "type": "function", "function": dict(call["function"])}]}}]})
        chunks.append(head | {"choices": [{"index": i, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if completion.get("usage"):
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


class _LocalHTTPServer:
    """A ThreadingHTTPServer on 127.0.0.1 run in a daemon thread (start/stop or ``with``)."""

    _thread_name = "local-http"
    _httpd: ThreadingHTTPServer
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: pass it as an OpenAI client's ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Any:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ScriptedChatServer(_LocalHTTPServer):
    """Serve scripted chat completions on ``127.0.0.1:<port>`` in a background thread.

    Args:
        script: replies in order, or a responder callable.
        model: the model id reported by ``/v1/models`` and in responses.
        port: 0 picks a free port.
    """

    def __init__(self, script: Sequence[dict[str, Any]] | Responder, *, model: str = "scripted", port: int = 0) -> None:
        self._script = script if callable(script) else list(script)
        self._index = 0
        self._lock = threading.Lock()
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "local"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                try:
                    reply = server._next(body)
                except ScriptExhausted as exc:
                    server.errors.append(str(exc))
                    self._send(500, {"error": {"message": str(exc), "type": "script_exhausted"}})
                    return
                if "status" in reply:
                    self._send(int(reply["status"]), {"error": {"message": reply.get("message", "scripted error")}})
                    return
                completion = server._completion(reply, body)
                if body.get("stream"):
                    self._stream(completion)
                else:
                    self._send(200, completion)

            def _stream(self, completion: dict[str, Any]) -> None:
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in stream_chunks(completion))
                data += b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = None

    @classmethod
    def from_file(cls, path: str | Path, *, model: str = "scripted", port: int = 0) -> ScriptedChatServer:
        """A server replaying recorded replies from ``path``.

        Accepted contents: JSON Lines of ``{"request_sha": ..., "reply": ...}`` (as :class:`RecordingProxy`
        writes; a request is answered with the next reply recorded under its :func:`request_sha`, entries
        without a hash are served in file order to requests that match none), or one JSON list of replies
        served in order (the plain script format).  A reply is a script reply or a whole completion.

        Raises:
            ValueError: the file is not in one of these forms (the message names the file and line).
            FileNotFoundError: no such file.
        """
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        stripped = text.lstrip()
        if stripped.startswith("["):
            try:
                replies = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}: not valid JSON: {exc}") from exc
            if not all(isinstance(r, dict) for r in replies):
                raise ValueError(f"{p}: a plain script must be a list of reply objects")
            return cls(replies, model=model, port=port)
        entries: list[tuple[str | None, dict[str, Any]]] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{lineno}: not valid JSON: {exc}") from exc
            if not isinstance(item, dict) or not isinstance(item.get("reply"), dict):
                raise ValueError(f"{p}:{lineno}: expected an object with a \"reply\" object")
            sha = item.get("request_sha")
            if sha is not None and not isinstance(sha, str):
                raise ValueError(f"{p}:{lineno}: \"request_sha\" must be a string")
            entries.append((sha, item["reply"]))
        return cls(_Replay(entries, str(p)), model=model, port=port)



    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            script = self._script
        if callable(script):
            return script(body)
        with self._lock:
            if self._index >= len(script):
                raise ScriptExhausted(f"script has {len(script)} replies; request {self._index + 1} has none")
            reply = script[self._index]
            self._index += 1
            return reply

    def _completion(self, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        if "choices" in reply:  # a whole completion (recorded): served as it was
            return reply
        n = len(self.requests)
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        if reply.get("tool_calls"):
            calls = []
            for i, c in enumerate(reply["tool_calls"]):
                fn = dict(c.get("function", c))
                if not isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.dumps(fn.get("arguments", {}))
                calls.append({"id": c.get("id", f"call_{n}_{i}"), "type": "function",
                              "function": {"name": fn["name"], "arguments": fn["arguments"]}})
            message["tool_calls"] = calls
        prompt_tokens = sum(len(str(m.get("content") or "")) // 4 + 1 for m in body.get("messages", []))
        completion_tokens = len(json.dumps(message)) // 4 + 1
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }






class RecordingProxy(_LocalHTTPServer):
    """An OpenAI-compatible server that forwards chat completions to a real endpoint and records them.

    Point a client (``envfactory gen ... --base-url proxy.base_url``) at the proxy: each
    ``POST .../chat/completions`` is forwarded to ``upstream_base_url + "/chat/completions"`` with
    ``Authorization: Bearer $<api_key_env>`` (when that variable is set), the upstream's answer goes back
    unchanged, and each successful (2xx, JSON) answer is appended to ``out_path`` as one JSON line
    ``{"request_sha": request_sha(body), "reply": <completion>}`` (plus ``"request": body`` with
    ``keep_requests``).  Errors from the upstream are passed through and not recorded, so a client that
    retries records only the answer it finally got.  ``GET .../models`` is forwarded too.  Streaming
    requests are refused (400).  Replay the file with :meth:`ScriptedChatServer.from_file`.

    Args:
        upstream_base_url: the real endpoint's base URL, e.g. ``http://gpu-box:8000/v1``.
        out_path: JSON Lines file to append to (created with its folder).
        api_key_env: environment variable holding the upstream's key.
        port: 0 picks a free port.
        timeout_s: per forwarded request.
        keep_requests: also store each request body in the file (larger, handy to debug a replay miss).
    """

    def __init__(self, upstream_base_url: str, out_path: str | Path, *, api_key_env: str = "OPENAI_API_KEY",
                 port: int = 0, timeout_s: float = 300.0, keep_requests: bool = False) -> None:
        self.upstream_base_url = upstream_base_url.rstrip("/")
        self.out_path = Path(out_path)
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.keep_requests = keep_requests
        self.requests: list[dict[str, Any]] = []
        self.recorded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send_raw(self, status: int, data: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                self._send_raw(status, json.dumps({"error": {"message": message}}).encode())

            def do_GET(self) -> None:  # noqa: N802
                if not self.path.rstrip("/").endswith("/models"):
                    self._error(404, f"no route {self.path}")
                    return
                self._send_raw(*proxy._forward("GET", "/models", None))

            def do_POST(self) -> None:  # noqa: N802
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._error(404, f"no route {self.path}")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) or b"{}"
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._error(400, "request body is not JSON")
                    return
                if body.get("stream"):
                    self._error(400, "RecordingProxy does not record streamed completions")
                    return
                with proxy._lock:
                    proxy.requests.append(body)
                status, data, ctype = proxy._forward("POST", "/chat/completions", raw)
                if 200 <= status < 300:
                    proxy._record(body, data)
                self._send_raw(status, data, ctype)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = None

    def _forward(self, method: str, route: str, data: bytes | None) -> tuple[int, bytes, str]:
        req = urllib.request.Request(self.upstream_base_url + route, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        key = os.environ.get(self.api_key_env)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as exc:  # the upstream's own error: pass it through
            return exc.code, exc.read(), exc.headers.get("Content-Type", "application/json")
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            body = {"error": {"message": f"upstream {self.upstream_base_url} unreachable: {exc}", "type": "proxy"}}
            return 502, json.dumps(body).encode(), "application/json"

    def _record(self, body: dict[str, Any], data: bytes) -> None:
        try:
            reply = json.loads(data)
        except json.JSONDecodeError:
            return  # not a completion: nothing replayable
        entry: dict[str, Any] = {"request_sha": request_sha(body), "reply": reply}
        if self.keep_requests:
            entry["request"] = body
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            with self.out_path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
            self.recorded += 1






