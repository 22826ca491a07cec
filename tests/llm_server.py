"""A scripted LLM server over real HTTP for tests: Anthropic Messages and Batches, OpenAI Chat Completions.

Tests queue `Reply` objects with `server.script(...)`; each request pops one (or gets
`default_reply`). The real anthropic SDK, litellm and httpx talk to it, and so does
the nanoagent CLI, in the test process or as a subprocess. Anthropic prompt caching is simulated: a
prefix ending at a `cache_control` block that an earlier request also sent counts
as a cache read.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str = ""
    tool_calls: list = field(default_factory=list)  # (name, dict | raw str) or (name, arguments, id)
    thinking: str = ""
    status: int = 200
    error_message: str = ""
    error_type: str = ""
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    release: threading.Event | None = None  # answer only once the test sets it (tests wait on conditions, not time)
    chunk_delay: float = 0.0
    cut_after: int | None = None  # close the connection before event number `cut_after`
    cut_inside: bool = False  # ... after sending the first half of that event's bytes (a torn line)
    stall_after: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    stop_reason: str | None = None
    echo: bool = False
    stream_error: str = ""  # Anthropic: a ping, then an `error` event of this type (overloaded_error) in a 200 stream
    batch_polls: int = 0  # Message Batches: polls answered "in_progress" before the batch has ended
    batch_result: str = "succeeded"  # Message Batches: "succeeded" | "errored" | "expired" | "canceled"


@dataclass
class Recorded:
    path: str
    headers: dict
    body: Any
    api: str


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


class _Cut(Exception):
    pass


@dataclass
class _Batch:
    id: str
    lines: list[dict]  # one results-file line per request, served once the batch has ended
    polls_left: int
    canceled: bool = False
    ended: bool = False


class LLMServer:
    def __init__(self) -> None:
        self._queue: list[Reply] = []
        self._lock = threading.Lock()
        self._cache: set[str] = set()
        self._closing = threading.Event()
        self.requests: list[Recorded] = []
        self.busy: list[tuple[float, float]] = []  # each POST's (start, end), time.monotonic: the bench's server share
        self.first_text: list[float] = []  # when each streamed reply's first text was sent, time.monotonic
        self.batches: dict[str, _Batch] = {}
        self.default_reply = Reply(text="ok")
        self.models = ["gpt-test"]  # what GET .../models lists (Ollama's OpenAI-compatible model list has this shape)
        self.transcriptions = Transcriptions()  # the /audio/transcriptions route (appended below)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.busy.clear()
            self.first_text.clear()
            self._cache.clear()
            self.batches.clear()
            self.default_reply = Reply(text="ok")  # a test that changed it must not leak it to the next one
            self.models = ["gpt-test"]
            self.transcriptions = Transcriptions()

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, record: Recorded) -> Reply:
        with self._lock:
            self.requests.append(record)
            return self._queue.pop(0) if self._queue else self.default_reply

    def _next_batch(self, record: Recorded, count: int) -> list[Reply]:
        """Record a batch creation; each of its `count` requests takes the next scripted reply."""
        with self._lock:
            self.requests.append(record)
            return [self._queue.pop(0) if self._queue else self.default_reply for _ in range(count)]

    def _new_batch(self, requests: list[dict], replies: list[Reply]) -> _Batch:
        lines = [batch_line(self, request, reply) for request, reply in zip(requests, replies, strict=True)]
        with self._lock:
            batch = _Batch(f"msgbatch_test{len(self.batches)}", lines, max((r.batch_polls for r in replies), default=0))
            self.batches[batch.id] = batch
            return batch

    def _batch(self, record: Recorded, batch_id: str, poll: bool = False, cancel: bool = False) -> _Batch | None:
        """Record a request about a batch; a poll counts down to "ended", a cancel ends it at the next poll."""
        with self._lock:
            self.requests.append(record)
            batch = self.batches.get(batch_id)
            if batch is None or batch.ended:
                return batch
            batch.canceled = batch.canceled or cancel
            if poll and (batch.canceled or batch.polls_left == 0):
                batch.ended = True
                if batch.canceled:
                    batch.lines = [{"custom_id": line["custom_id"], "result": {"type": "canceled"}} for line in batch.lines]
            elif poll:
                batch.polls_left -= 1
            return batch

    def _cache_usage(self, body: dict) -> tuple[int, int]:
        """(cache_read, cache_write) token estimates for an Anthropic request."""
        blocks: list[Any] = list(body.get("tools") or [])
        system = body.get("system")
        blocks += system if isinstance(system, list) else ([{"type": "text", "text": system}] if system else [])
        for message in body.get("messages", []):
            content = message["content"]
            blocks += content if isinstance(content, list) else [{"type": "text", "text": content}]
        prefix, read, write, hashes = "", 0, 0, []
        for block in blocks:
            clean = {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
            prefix += json.dumps(clean, sort_keys=True)
            if isinstance(block, dict) and "cache_control" in block:
                hashes.append((hashlib.sha256(prefix.encode()).hexdigest(), len(prefix) // 4))
        with self._lock:
            for digest, size in hashes:
                if digest in self._cache:
                    read = size
            last = hashes[-1][1] if hashes else 0
            write = max(0, last - read) if hashes and hashes[-1][0] not in self._cache else 0
            self._cache.update(d for d, _ in hashes)
        return read, write


def _make_handler(server: LLMServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError, _Cut):
                pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                with server._lock:
                    server.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, None,
                                                    "models"))
                    models = list(server.models)
                self._json(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in models]})
            elif "/messages/batches/" in self.path:
                self._batch_get(self.path.split("?")[0])
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            started = time.monotonic()
            try:
                self._post()
            finally:
                with server._lock:
                    server.busy.append((started, time.monotonic()))

        def _post(self) -> None:
            if self.path.split("?")[0].endswith("/audio/transcriptions"):
                transcription_route(server, self)
                return
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            if "/messages/batches" in path:
                self._batch_post(path, body)
                return
            if path.endswith("/count_tokens"):
                self._json(200, {"input_tokens": len(json.dumps(body)) // 4})
                return
            if path.endswith("/embeddings"):
                with server._lock:
                    server.requests.append(Recorded(path, {k.lower(): v for k, v in self.headers.items()}, body,
                                                    "embeddings"))
                self._json(200, embeddings_reply(body))
                return
            api = "anthropic" if path.endswith("/messages") else "openai"
            reply = server._next(Recorded(path, {k.lower(): v for k, v in self.headers.items()}, body, api))
            if reply.delay:
                time.sleep(reply.delay)
            if reply.release is not None:
                reply.release.wait(60)
            if reply.status >= 400:
                self._error(api, reply)
                return
            if reply.echo:
                reply = Reply(**{**reply.__dict__, "text": _last_user_text(body)})
            events = anthropic_events(server, body, reply) if api == "anthropic" else openai_events(body, reply)
            if body.get("stream"):
                self._stream(api, events, reply)
            else:
                self._json(200, anthropic_message(events) if api == "anthropic" else openai_message(events))

        def _batch_post(self, path: str, body: Any) -> None:
            """Create a Message Batch (a scripted HTTP error fails the creation itself) or cancel one."""
            record = Recorded(path, {k.lower(): v for k, v in self.headers.items()}, body, "anthropic-batch")
            if path.endswith("/cancel"):
                self._batch_answer(server._batch(record, path.split("/")[-2], cancel=True), path.split("/")[-2])
                return
            requests = body.get("requests") or []
            replies = server._next_batch(record, len(requests))
            failed = next((r for r in replies if r.status >= 400 and r.batch_result == "succeeded"), None)
            if failed is not None:
                self._error("anthropic", failed)
                return
            self._json(200, batch_object(server, server._new_batch(requests, replies)))

        def _batch_get(self, path: str) -> None:
            """Retrieve a Message Batch (each call is one poll) or its JSONL results once it has ended."""
            parts = path.rstrip("/").split("/")
            results = parts[-1] == "results"
            batch_id = parts[-2] if results else parts[-1]
            record = Recorded(path, {k.lower(): v for k, v in self.headers.items()}, None, "anthropic-batch")
            batch = server._batch(record, batch_id, poll=not results)
            if not results:
                self._batch_answer(batch, batch_id)
            elif batch is not None and batch.ended:
                raw = "".join(json.dumps(line) + "\n" for line in batch.lines).encode()
                self.send_response(200)
                self.send_header("content-type", "application/binary")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            else:
                self._batch_answer(None, batch_id)

        def _batch_answer(self, batch: _Batch | None, batch_id: str) -> None:
            if batch is None:
                self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                            "message": f"no batch (or no results yet) for {batch_id}"}})
            else:
                self._json(200, batch_object(server, batch))

        def _json(self, status: int, data: Any, headers: dict | None = None) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, api: str, reply: Reply) -> None:
            message = reply.error_message or f"scripted error {reply.status}"
            if api == "anthropic":
                kind = reply.error_type or ERROR_TYPES.get(reply.status, "api_error")
                data = {"type": "error", "error": {"type": kind, "message": message}}
            else:
                data = {"error": {"message": message, "type": reply.error_type or "server_error", "code": None}}
            self._json(reply.status, data, reply.headers)

        def _stream(self, api: str, events: list[tuple[str, dict]], reply: Reply) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.close_connection = True
            texted = False
            for number, (name, data) in enumerate(events):
                line = f"event: {name}\ndata: {json.dumps(data)}\n\n" if api == "anthropic" else f"data: {json.dumps(data)}\n\n"
                if reply.cut_after is not None and number >= reply.cut_after:
                    if reply.cut_inside:
                        self.wfile.write(line.encode()[:len(line) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    raise _Cut
                if reply.stall_after is not None and number >= reply.stall_after:
                    self.wfile.flush()
                    server._closing.wait(30)
                    raise _Cut
                self.wfile.write(line.encode())
                self.wfile.flush()
                if not texted and _has_text(data):
                    texted = True
                    server.first_text.append(time.monotonic())
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
            if api == "openai":
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

    return Handler


def _has_text(data: dict) -> bool:
    """An Anthropic text delta, or an OpenAI chunk with content."""
    if (data.get("delta") or {}).get("type") == "text_delta":
        return True
    return any((c.get("delta") or {}).get("content") for c in data.get("choices") or ())


def _last_user_text(body: dict) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message["content"]
            if isinstance(content, str):
                return content
            return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _split(text: str, parts: int = 3) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _args_json(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def anthropic_events(server: LLMServer, body: dict, reply: Reply) -> list[tuple[str, dict]]:
    read, write = server._cache_usage(body)
    total = reply.input_tokens if reply.input_tokens is not None else len(json.dumps(body)) // 4
    usage = {"input_tokens": max(1, total - read - write), "output_tokens": 1,
             "cache_read_input_tokens": read, "cache_creation_input_tokens": write}
    message = {"id": "msg_test", "type": "message", "role": "assistant", "model": body.get("model", ""),
               "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": message})]
    if reply.stream_error:  # as the API fails after it has answered 200: an error event, then the end
        error = {"type": reply.stream_error, "message": reply.error_message or reply.stream_error.replace("_", " ")}
        return [*events, ("ping", {"type": "ping"}), ("error", {"type": "error", "error": error})]
    index = 0

    def block(start: dict, deltas: list[dict]) -> None:
        nonlocal index
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        for delta in deltas:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if reply.thinking:
        block({"type": "thinking", "thinking": "", "signature": ""},
              [{"type": "thinking_delta", "thinking": p} for p in _split(reply.thinking)]
              + [{"type": "signature_delta", "signature": "sig-" + hashlib.md5(reply.thinking.encode()).hexdigest()}])
    if reply.text:
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in _split(reply.text)])
    for n, (name, arguments, *given) in enumerate(reply.tool_calls):
        call_id = given[0] if given else f"toolu_{len(server.requests)}_{n}"
        block({"type": "tool_use", "id": call_id, "name": name, "input": {}},
              [{"type": "input_json_delta", "partial_json": p} for p in _split(_args_json(arguments), 2)])
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    output = reply.output_tokens if reply.output_tokens is not None else max(1, len(reply.text) // 4)
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": output}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def batch_line(server: LLMServer, request: dict, reply: Reply) -> dict:
    """One line of a batch's results file, built like a non-streaming Anthropic reply."""
    params = request.get("params") or {}
    if reply.batch_result == "errored":
        kind = reply.error_type or ERROR_TYPES.get(reply.status, "api_error")
        error = {"type": kind, "message": reply.error_message or f"scripted batch error ({kind})"}
        result: dict = {"type": "errored", "error": {"type": "error", "error": error}}
    elif reply.batch_result in ("expired", "canceled"):
        result = {"type": reply.batch_result}
    else:
        if reply.echo:
            reply = Reply(**{**reply.__dict__, "text": _last_user_text(params)})
        result = {"type": "succeeded", "message": anthropic_message(anthropic_events(server, params, reply))}
    return {"custom_id": request.get("custom_id", ""), "result": result}


def batch_object(server: LLMServer, batch: _Batch) -> dict:
    status = "ended" if batch.ended else "canceling" if batch.canceled else "in_progress"
    counts = {"processing": 0 if batch.ended else len(batch.lines), "succeeded": 0, "errored": 0, "canceled": 0,
              "expired": 0}
    for line in batch.lines if batch.ended else ():
        counts[line["result"]["type"]] += 1
    return {"id": batch.id, "type": "message_batch", "processing_status": status, "request_counts": counts,
            "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-02T00:00:00Z",
            "ended_at": "2025-01-01T00:01:00Z" if batch.ended else None,
            "cancel_initiated_at": "2025-01-01T00:00:30Z" if batch.canceled else None, "archived_at": None,
            "results_url": f"{server.url}/v1/messages/batches/{batch.id}/results" if batch.ended else None}


def anthropic_message(events: list[tuple[str, dict]]) -> dict:
    message = dict(events[0][1]["message"])
    content: list[dict] = []
    for name, data in events[1:]:
        if name == "content_block_start":
            content.append(dict(data["content_block"], _json=""))
        elif name == "content_block_delta":
            d, b = data["delta"], content[-1]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] += d["signature"]
            elif d["type"] == "input_json_delta":
                b["_json"] += d["partial_json"]
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"] = {**message["usage"], **data["usage"]}
    for b in content:
        raw = b.pop("_json")
        if b["type"] == "tool_use":
            b["input"] = json.loads(raw) if raw else {}
    message["content"] = content
    return message


def openai_events(body: dict, reply: Reply) -> list[tuple[str, dict]]:
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "")}

    def chunk(delta: dict, finish: str | None = None) -> tuple[str, dict]:
        return ("", {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in _split(reply.text)]
    for n, (name, arguments, *given) in enumerate(reply.tool_calls):
        parts = _split(_args_json(arguments), 2) or [""]
        events.append(chunk({"tool_calls": [{"index": n, "id": given[0] if given else f"call_{n}", "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": n, "function": {"arguments": p}}]}) for p in parts]
    finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
    events.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage") or not body.get("stream"):
        prompt = reply.input_tokens if reply.input_tokens is not None else len(json.dumps(body)) // 4
        output = reply.output_tokens if reply.output_tokens is not None else max(1, len(reply.text) // 4)
        events.append(("", {**base, "choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": 0}}}))
    return events


def openai_message(events: list[tuple[str, dict]]) -> dict:
    text, calls, finish, usage = "", {}, "stop", None
    for _, data in events:
        usage = data.get("usage") or usage
        for choice in data["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls") or ():
                entry = calls.setdefault(tc["index"], {"id": tc.get("id"), "type": "function",
                                                       "function": {"name": "", "arguments": ""}})
                entry["function"]["name"] += tc["function"].get("name", "")
                entry["function"]["arguments"] += tc["function"].get("arguments", "")
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "test",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def embeddings_reply(body: dict, dims: int = 256) -> dict:
    """OpenAI /v1/embeddings with deterministic vectors: hashed character trigrams of each word, so words that
    share spelling ("colour", "color") land near each other and unrelated words do not."""
    inputs = body.get("input") or []
    data = []
    for index, text in enumerate([inputs] if isinstance(inputs, str) else inputs):
        vector = [0.0] * dims
        for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                vector[int(hashlib.sha1(padded[i:i + 3].encode()).hexdigest(), 16) % dims] += 1.0
        data.append({"object": "embedding", "index": index, "embedding": vector})
    return {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def start_server() -> LLMServer:
    return LLMServer()


# --- speech to text: POST /audio/transcriptions (OpenAI's, Groq's and local whisper servers' shape) ----------------


@dataclass
class Transcript:
    """One scripted answer of the transcription route: the text, or an HTTP error."""

    text: str = "scripted transcript"
    status: int = 200
    error_message: str = ""
    duration: float | None = None  # seconds of audio, as OpenAI's and Groq's answers report it (when scripted)
    usage: dict | None = None  # {"type": "tokens", "input_tokens": ...} or {"type": "duration", "seconds": ...}


@dataclass
class TranscriptionRequest:
    """What a client sent: its headers (lower-case names), the form's fields, and the file."""

    headers: dict
    fields: dict
    file_name: str
    file_type: str
    file: bytes


class Transcriptions:
    """The route's state: scripted answers (each request pops one, else `default`) and the requests received."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Transcript] = []
        self.default = Transcript()
        self.requests: list[TranscriptionRequest] = []

    def script(self, *answers: Transcript) -> None:
        with self._lock:
            self._queue.extend(answers)

    def _next(self, request: TranscriptionRequest) -> Transcript:
        with self._lock:
            self.requests.append(request)
            return self._queue.pop(0) if self._queue else self.default


def transcription_route(server: LLMServer, handler: BaseHTTPRequestHandler) -> None:
    """Answer a multipart transcription request with the next scripted transcript (`{"text": ...}`) or error."""
    from email.parser import BytesParser
    from email.policy import HTTP

    length = int(handler.headers.get("content-length") or 0)
    raw = handler.rfile.read(length)
    content_type = handler.headers.get("content-type", "")
    form = BytesParser(policy=HTTP).parsebytes(f"content-type: {content_type}\r\n\r\n".encode() + raw)
    fields, file_name, file_type, data = {}, "", "", b""
    for part in form.iter_parts() if form.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            file_name, file_type, data = part.get_filename() or "", part.get_content_type(), payload
        elif name:
            fields[str(name)] = payload.decode()
    headers = {k.lower(): v for k, v in handler.headers.items()}
    answer = server.transcriptions._next(TranscriptionRequest(headers, fields, file_name, file_type, data))
    if answer.status >= 400:
        body = {"error": {"message": answer.error_message or f"scripted error {answer.status}", "type": "server_error"}}
    else:
        body = {"text": answer.text}
        if answer.duration is not None:
            body["duration"] = answer.duration
        if answer.usage is not None:
            body["usage"] = answer.usage
    encoded = json.dumps(body).encode()
    handler.send_response(answer.status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(encoded)))
    handler.end_headers()
    handler.wfile.write(encoded)
