"""A small OpenAI-compatible chat server on 127.0.0.1 for tests (real HTTP, SSE).

Each request takes the next behaviour from ``server.plan`` (default ``"ok"``):
``ok`` streams ``"echo: <last user text>"`` word by word; ``say:<text>``
answers exactly ``<text>`` (a scripted reply); ``500`` answers an
error; ``401``; ``404``; ``429``; ``break`` streams two pieces then an error
event and closes (a failure mid-stream); ``cut`` streams two pieces and
closes without finishing; ``slow`` streams 40 pieces 100 ms apart. Every
request body is kept in ``server.requests``. Code that runs elsewhere (a
page) steers it over HTTP: ``POST /v1/control {"plan": [...]}``, ``POST /v1/requests``. CORS is open so a page on
another port can call it.

``POST /v1/messages`` speaks Anthropic's Messages API with the same plan: its
error bodies, and its SSE events (``message_start``, ``content_block_start``,
``content_block_delta``/``text_delta``, ``content_block_stop``,
``message_delta``, ``message_stop``, ``ping``; ``break`` sends an ``error``
event, ``cut`` closes before ``message_stop``).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

__all__ = ["LLMServer"]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Authorization, Content-Type")
        self.send_header("Access-Control-Allow-Methods", "POST, GET, OPTIONS")
        self.send_header("Access-Control-Expose-Headers", "Retry-After")

    def do_OPTIONS(self) -> None:  # noqa: N802
        self.send_response(204)
        self._cors()
        self.end_headers()

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self._cors()
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _event(self, obj: Any) -> None:
        self.wfile.write(f"data: {json.dumps(obj) if not isinstance(obj, str) else obj}\n\n".encode())
        self.wfile.flush()

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        srv = self.server
        with srv.lock:
            srv.requests.append(
                {
                    "path": self.path,
                    "body": body,
                    "auth": self.headers.get("Authorization"),
                    "x-api-key": self.headers.get("x-api-key"),
                    "anthropic-version": self.headers.get("anthropic-version"),
                }
            )
            anthropic = self.path.endswith("/v1/messages")
            chat = self.path.endswith("/chat/completions") or anthropic
            behaviour = srv.plan.pop(0) if srv.plan and chat else "ok"
        if self.path.endswith("/control"):  # {"plan": [...]} resets the plan and the request log
            with srv.lock:
                srv.plan[:] = list(body.get("plan", []))
                srv.requests.clear()
            return self._json(200, {"ok": True})
        if self.path.endswith("/requests"):
            with srv.lock:
                return self._json(200, srv.requests[:-1])
        if anthropic:
            return self._anthropic(body, behaviour)
        if not self.path.endswith("/chat/completions"):
            return self._json(404, {"error": {"message": "no such route"}})
        if behaviour in ("500", "401", "404", "429"):
            status = int(behaviour)
            headers = {"Retry-After": "2"} if status == 429 else None
            return self._json(status, {"error": {"message": f"injected {status}"}}, headers)
        last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
        content = last.get("content")
        text = (
            content
            if isinstance(content, str)
            else " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
        )
        said = behaviour[len("say:") :] if behaviour.startswith("say:") else f"echo: {text}"
        words = said.split(" ")
        if not body.get("stream"):
            return self._json(200, {"choices": [{"message": {"role": "assistant", "content": said}}]})
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if behaviour == "slow":
            words = [f"w{i}" for i in range(40)]
        for i, w in enumerate(words):
            piece = w if i == 0 else " " + w
            self._event({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            if behaviour == "slow":
                time.sleep(0.1)
            if behaviour in ("break", "cut") and i == 1:
                if behaviour == "break":
                    self._event({"error": {"message": "injected failure mid-stream"}})
                self.close_connection = True
                return
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._event("[DONE]")

    def _named_event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(f"event: {obj['type']}\ndata: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()

    def _anthropic(self, body: dict[str, Any], behaviour: str) -> None:
        """The Messages API: echo the last user turn's text, as JSON or as Anthropic SSE."""
        if behaviour in ("500", "401", "404", "429"):
            status = int(behaviour)
            kinds = {
                500: "api_error",
                401: "authentication_error",
                404: "not_found_error",
                429: "rate_limit_error",
            }
            headers = {"Retry-After": "2"} if status == 429 else None
            return self._json(
                status,
                {"type": "error", "error": {"type": kinds[status], "message": f"injected {status}"}},
                headers,
            )
        last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
        content = last.get("content")
        text = (
            content
            if isinstance(content, str)
            else " ".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text"
            )
        )
        words = f"echo: {text}".split(" ")
        if not body.get("stream"):
            return self._json(
                200,
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": " ".join(words)}],
                    "stop_reason": "end_turn",
                },
            )
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self._named_event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": body.get("model"),
                },
            }
        )
        self._named_event(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        )
        self._named_event({"type": "ping"})
        for i, w in enumerate(words):
            piece = w if i == 0 else " " + w
            self._named_event(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
            if behaviour in ("break", "cut") and i == 1:
                if behaviour == "break":
                    self._named_event(
                        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                    )
                self.close_connection = True
                return
        self._named_event({"type": "content_block_stop", "index": 0})
        self._named_event(
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}
        )
        self._named_event({"type": "message_stop"})


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.plan: list[str] = []
        self.requests: list[dict[str, Any]] = []


class LLMServer:
    def __init__(self) -> None:
        self._srv = _Server()
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}/v1"
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()

    @property
    def plan(self) -> list[str]:
        return self._srv.plan

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._srv.requests

    def reset(self, *plan: str) -> None:
        with self._srv.lock:
            self._srv.plan[:] = list(plan)
            self._srv.requests.clear()

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
