"""A small OpenAI-compatible chat server over a policy (`shopdistill serve`'s backend).

Standard library only (`ThreadingHTTPServer`): no dependency, and one thread per connection
is plenty for a scripted policy or a tiny CPU model. It speaks HTTP/1.1 keep-alive so the
evaluation's client reuses connections. Endpoints: `GET /v1/models` (answers once the server
is bound, which happens only after the policy is built), `POST /v1/chat/completions`
(non-streaming). A bad request gets a 4xx JSON error (a bad or negative Content-Length, a body
over the cap, JSON nested too deep, numbers out of range: 400, 411, 413), a body that arrives
too slowly a 408, a policy failure or an unserializable reply a 500; the server never dies on a
request. Every connection has a socket timeout, every request (request line, headers and body)
a total deadline, and the server a bound on connections at once (more are answered 503 and
closed): slow, silent or many clients cannot pin the server's threads. `shopdistill serve`
answers 404 `model_not_found` for a model it does not serve, as OpenAI-compatible servers do.
"""

from __future__ import annotations

import io
import json
import math
import re
import signal
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shopdistill_assets.agent.policies import Policy
from shopdistill_assets.core.tokens import estimate_tokens

MAX_BODY_BYTES = 64 * 1024 * 1024
CLIENT_TIMEOUT_S = 30.0  # per socket read or write: a silent client frees its thread
BODY_TIMEOUT_S = 60.0  # for a whole request body, however it trickles in
REQUEST_TIMEOUT_S = 90.0  # for a whole request from its first byte: request line, headers, body
MAX_CONNECTIONS = 64  # connections served at once (one thread each); more get 503
_LENGTH = re.compile(r"\d{1,19}")


class PolicyRequestError(ValueError):
    """The request cannot be served (e.g. the prompt exceeds the model's context): HTTP 400."""


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    top_p: float | None = None  # OpenAI's nucleus sampling; None: the checkpoint's generation_config
    top_k: int | None = None  # vLLM's extension of the same body; None or <= 0 as above / off
    extra: dict[str, Any] = field(default_factory=dict)

    def sampling(self) -> dict[str, Any]:
        """top_p / top_k as the policy's keyword arguments, only those the request gave."""
        return {k: v for k, v in (("top_p", self.top_p), ("top_k", self.top_k)) if v is not None}


def _number(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyRequestError(f"'{key}' must be a {kind.__name__}")
    if isinstance(value, int) and abs(value) > 2**53:
        raise PolicyRequestError(f"'{key}' is out of range")
    if isinstance(value, float) and (not math.isfinite(value) or (kind is int and not value.is_integer())):
        raise PolicyRequestError(f"'{key}' must be a finite {kind.__name__}")
    return kind(value)


def _utf8_text(value: Any) -> None:
    """JSON escapes can spell a lone surrogate (\\ud800) that no UTF-8 text holds: a bad request."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise PolicyRequestError("the request holds a lone UTF-16 surrogate escape (e.g. \\ud800): not text") from None


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a chat-completions body; raises PolicyRequestError with a readable message."""
    if not isinstance(body, dict):
        raise PolicyRequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise PolicyRequestError("'messages' must be a non-empty list of objects with a 'role'")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise PolicyRequestError("'tools' must be a list of objects")
    if body.get("stream"):
        raise PolicyRequestError("streaming is not supported")
    max_tokens = _number(body, "max_tokens", int) or _number(body, "max_completion_tokens", int)
    top_p = _number(body, "top_p", float)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise PolicyRequestError("'top_p' must be in (0, 1]")
    _utf8_text([messages, tools, body.get("model")])
    return ChatRequest(
        model=str(body.get("model") or ""), messages=messages, tools=tools,
        temperature=_number(body, "temperature", float), max_tokens=max_tokens, seed=_number(body, "seed", int),
        top_p=top_p, top_k=_number(body, "top_k", int),
    )


def completion_response(message: dict[str, Any], model: str, prompt_text: str) -> dict[str, Any]:
    """Wrap an assistant message in the chat.completion shape (usage estimated unless given)."""
    usage = message.pop("usage", None)
    content = message.get("content")
    tool_calls = message.get("tool_calls") or []
    out_message: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else None}
    if tool_calls:
        out_message["tool_calls"] = tool_calls
    if message.get("reasoning_content"):
        out_message["reasoning_content"] = message["reasoning_content"]
    if not isinstance(usage, dict):
        completion_text = (content or "") + (message.get("reasoning_content") or "") + json.dumps(tool_calls)
        usage = {"prompt_tokens": estimate_tokens(prompt_text), "completion_tokens": estimate_tokens(completion_text)}
    usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": out_message, "finish_reason": "tool_calls" if tool_calls else "stop",
                     "logprobs": None}],
        "usage": usage,
    }


class _DeadlineSocketReader(io.RawIOBase):
    """The connection's reads, bounded twice: each by the socket timeout (a silent client), and
    all reads of one request by a total deadline from its first byte (a client that sends a
    header byte just before each socket timeout)."""

    def __init__(self, sock: Any, read_timeout_s: float, request_timeout_s: float) -> None:
        self.sock, self.read_timeout_s, self.request_timeout_s = sock, read_timeout_s, request_timeout_s
        self.deadline: float | None = None  # set by a request's first byte, cleared after its reply

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        timeout = self.read_timeout_s
        if self.deadline is not None:
            timeout = min(timeout, self.deadline - time.monotonic())
            if timeout <= 0:
                raise TimeoutError("request deadline passed")
        self.sock.settimeout(timeout)
        try:
            n = self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.read_timeout_s)  # writes keep the plain socket timeout
        if n and self.deadline is None:
            self.deadline = time.monotonic() + self.request_timeout_s
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall
    server: _PolicyHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
        pass

    def setup(self) -> None:
        self.timeout = self.server.client_timeout_s  # StreamRequestHandler sets it on the socket
        super().setup()
        self._reader = _DeadlineSocketReader(self.connection, self.server.client_timeout_s,
                                             self.server.request_timeout_s)
        self.rfile = io.BufferedReader(self._reader, 1 << 16)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()  # a TimeoutError in the headers closes the connection there
        finally:
            self._reader.deadline = None  # the next request on this connection gets its own

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        self._send_raw(status, json.dumps(payload).encode())

    def _send_raw(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error", close: bool = False) -> None:
        # close when the body was not (fully) read: its bytes must not be taken for the next request
        self.close_connection = self.close_connection or close
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "shopdistill"}
            self._send(200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") in ("/health", ""):
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path[:100]}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path[:100]}", close=True)
            return
        length = self._content_length()
        raw = self._read_body(length) if length is not None else None
        if raw is None:
            return
        try:
            request = parse_chat_request(json.loads(raw))
        except PolicyRequestError as exc:
            self._error(400, str(exc))
            return
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self._error(400, f"invalid JSON body: {type(exc).__name__}: {str(exc)[:200]}")
            return
        if self.server.strict_model and request.model != self.server.model_name:
            self._send(404, {"error": {"message": f"The model {request.model[:100]!r} does not exist; this server "
                                                  f"serves {self.server.model_name!r}",
                                       "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
            return
        self._respond(request, raw)

    def _content_length(self) -> int | None:
        """The body length, or None after answering a request that gives no usable one."""
        if self.headers.get("Transfer-Encoding"):
            self._error(400, "chunked request bodies are not supported: send Content-Length", close=True)
            return None
        values = self.headers.get_all("Content-Length") or []
        if not values:
            self._error(411, "Content-Length required", close=True)
            return None
        if len(values) > 1 or not _LENGTH.fullmatch(values[0].strip()):
            self._error(400, "Content-Length must be one non-negative integer", close=True)
            return None
        length = int(values[0])
        if length > MAX_BODY_BYTES:
            self._error(413, "request body too large", close=True)
            return None
        return length

    def _read_body(self, length: int) -> bytes | None:
        """The whole body within the body deadline, or None after answering 400 / 408."""
        deadline = time.monotonic() + self.server.body_timeout_s
        chunks, got = [], 0
        while got < length:
            if time.monotonic() > deadline:
                self._error(408, "request body too slow", close=True)
                return None
            try:
                chunk = self.rfile.read1(min(1 << 20, length - got))
            except TimeoutError:
                self._error(408, "request body timed out", close=True)
                return None
            if not chunk:
                self._error(400, f"incomplete body: {got} of {length} bytes", close=True)
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _respond(self, request: ChatRequest, raw: bytes) -> None:
        if self.server.latency_s:
            time.sleep(self.server.latency_s)  # stands in for a real endpoint's time per request
        try:
            message = self.server.policy(
                request.messages, request.tools, temperature=request.temperature,
                max_tokens=request.max_tokens, seed=request.seed, **request.sampling(),
            )
        except PolicyRequestError as exc:
            self._error(400, str(exc))
            return
        except Exception as exc:  # a policy bug must not take the server down
            self._error(500, f"policy failed: {type(exc).__name__}: {exc}"[:500], "server_error")
            return
        try:
            reply = completion_response(dict(message), request.model or self.server.model_name,
                                        raw.decode("utf-8", "replace"))
            data = json.dumps(reply)
        except (TypeError, ValueError, RecursionError) as exc:
            self._error(500, f"policy reply is not a chat message: {type(exc).__name__}", "server_error")
            return
        self._send_raw(200, data.encode())


class _PolicyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # bursts of concurrent episodes connect at once

    def __init__(self, address: tuple[str, int], policy: Policy, model_name: str, latency_s: float,
                 client_timeout_s: float = CLIENT_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 strict_model: bool = False) -> None:
        super().__init__(address, _Handler)
        self.policy = policy
        self.model_name = model_name
        self.latency_s = latency_s
        self.client_timeout_s = client_timeout_s
        self.body_timeout_s = body_timeout_s
        self.request_timeout_s = request_timeout_s
        self.strict_model = strict_model
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        # A thread per connection, up to max_connections; past that the client is told at once.
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: Any) -> None:
        body = json.dumps({"error": {"message": "server busy: too many connections", "type": "server_error",
                                     "code": 503}}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                f"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n").encode()
        try:
            request.settimeout(1.0)
            request.sendall(head + body)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that went away or went silent
            return
        super().handle_error(request, client_address)


@dataclass
class RunningServer:
    """A server running in a background thread; `url` is the OpenAI base URL (…/v1)."""

    httpd: _PolicyHTTPServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.httpd.server_address[0]}:{self.port}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(policy: Policy, host: str = "127.0.0.1", port: int = 0, *, model_name: str | None = None,
          latency_ms: float = 0.0, client_timeout_s: float = CLIENT_TIMEOUT_S,
          body_timeout_s: float = BODY_TIMEOUT_S, request_timeout_s: float = REQUEST_TIMEOUT_S,
          max_connections: int = MAX_CONNECTIONS, strict_model: bool = False) -> RunningServer:
    """Start serving `policy` in a daemon thread (port 0 picks a free port); returns at once.
    strict_model: a request naming another model gets 404 model_not_found (what `shopdistill
    serve` does); in-process servers of one evaluation take any name."""
    name = model_name or getattr(policy, "name", "shopdistill-policy")
    httpd = _PolicyHTTPServer((host, port), policy, name, latency_ms / 1000.0, client_timeout_s, body_timeout_s,
                              request_timeout_s, max_connections, strict_model)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True,
                              name=f"shopdistill-serve-{httpd.server_address[1]}")
    thread.start()
    return RunningServer(httpd, thread)


def serve_forever(policy: Policy, host: str = "127.0.0.1", port: int = 8000, *, model_name: str | None = None,
                  latency_ms: float = 0.0) -> None:
    """Blocking variant for the CLI: serves until interrupted (Ctrl-C) or terminated (SIGTERM:
    `docker stop`, a pod's shutdown). SIGTERM is handled here rather than left to its
    inherited disposition: a parent that ignores it (Dagster maps SIGTERM to SIGINT's handler,
    which is "ignore" under a background shell) would otherwise make the server unstoppable."""
    server = serve(policy, host, port, model_name=model_name, latency_ms=latency_ms, strict_model=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        server.thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def wait_ready(base_url: str, timeout_s: float = 60.0) -> bool:
    """Poll `GET {base_url}/models` until it answers 200 or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False
