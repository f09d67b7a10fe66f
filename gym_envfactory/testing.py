"""A local OpenAI-compatible chat-completions server that answers from a script, over real HTTP.

For tests and offline demos of code that talks to LLM endpoints (no network, no model)::

    with ScriptedChatServer([{"content": "hi"}]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")

The script is a list of assistant replies (dicts with ``content`` and/or ``tool_calls`` in the OpenAI
wire format; ``tool_calls[i].function.arguments`` may be a dict, it is encoded) consumed in order, or a
callable ``responder(request_json) -> reply dict``.  A reply ``{"status": 500}`` makes the server answer
with that HTTP error instead.  Every request body is kept in ``server.requests``.  Implements
``POST /v1/chat/completions`` and ``GET /v1/models`` (OpenAI API reference).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

__all__ = ["ScriptedChatServer", "ScriptExhausted"]


class ScriptExhausted(RuntimeError):
    """More requests arrived than the script has replies."""


Responder = Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedChatServer:
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
                self._send(200, server._completion(reply, body))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: pass it as an OpenAI client's ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            if callable(self._script):
                return self._script(body)
            if self._index >= len(self._script):
                raise ScriptExhausted(f"script has {len(self._script)} replies; request {self._index + 1} has none")
            reply = self._script[self._index]
            self._index += 1
            return reply

    def _completion(self, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
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

    def start(self) -> "ScriptedChatServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-chat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ScriptedChatServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
