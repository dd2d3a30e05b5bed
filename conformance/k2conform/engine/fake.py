"""A Kimi "engine" for CI: a real HTTP server on loopback that generates the corpus's
probe replays and parses them with an adapter, so the engine plugin can be proven without
a GPU (``k2conform serve-fake-engine``).  It speaks the adapter's format: the probes it
replays are that format's (``reference-k3`` or ``vllm-k3``: a Kimi K3 engine).  vLLM's own
OpenAIServingChat with a replaying engine client was not attempted: it needs a ModelConfig,
a model directory and a renderer.

It speaks the parts of the OpenAI API the plugin uses, the way vLLM frames them:
``POST /v1/chat/completions`` (JSON, or SSE ``data:`` lines ending with ``data: [DONE]``
when ``stream`` is true), ``GET /v1/models``, and vLLM's ``POST /tokenize`` (messages and
tools rendered by the reference renderer, tokenised by the stand-in Kimi tokenizer) and
``POST /detokenize`` (a K3 engine renders no chat: K3's renderer ships with the model, so
``/tokenize`` with messages is a 404).  The model output of a request is the probe's
``replay`` for the turn the conversation is at; it is parsed by the adapter (``reference``
by default) in ``whole`` or ``stream-token`` delivery, exactly as the conformance matrix does.

Deliberately broken behaviours, switchable per server (``FAULTS``), prove that the plugin
catches each one.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Mapping, Sequence

from k2conform.delivery import modes
from k2conform import markers
from k2conform.formats import FORMATS
from k2conform.case.corpus import ProbeCase, load_corpus
from k2conform.adapter.glue import RandomIds
from k2conform.adapter.harness import execute
from k2conform.errors import UsageError
from k2conform.model import Request, Result, StreamEvent, ToolCall

FAULTS: dict[str, str] = {
    "markers-in-content": "the raw tool-call section (marker bytes) is sent as content",
    "finish-stop-with-calls": "finish_reason is 'stop' although tool calls are returned",
    "arguments-not-json": "every call's arguments lose their last character (not JSON)",
    "renamed-id": "every call id is renamed (call_<n>) instead of the model's functions.NAME:IDX",
    "no-tokenize": "the server has no /tokenize endpoint (404)",
    # Wire faults (judge.wire): each breaks one rule of the SSE contract, parsers untouched.
    "raw-stop-finish": "the finish_reason is the raw stop-token id, 'stop_163586' (ROCm/ATOM#1727)",
    "chunk-after-finish": "an empty content chunk follows the finish chunk",
    "usage-twice": "with stream_options.include_usage, the usage chunk is sent twice",
    "content-twice": (
        "the streamed content is sent again before the finish chunk (vllm-project/vllm PR #50367)"
    ),
    "no-done": "the stream ends without data: [DONE]",
    "arguments-held-back": (
        "each call's arguments are held back and sent whole with its last argument chunk "
        "(vllm-project/vllm#50604)"
    ),
    "name-resent": "a call's name is sent again with its last argument chunk",
    "calls-lost-under-concurrency": (
        "a stream that starts while another is in flight loses its tool-call deltas and ends "
        "with 'stop' (vllm-project/vllm#54701)"
    ),
    # Not faults: what a conforming server may do, which the plugin must pass.
    "no-default-system-newline": (
        "(conforming) the injected default system prompt is followed by no newline"
    ),
    "one-call-of-two": (
        "(conforming: a model's choice) of several tool calls only the first is made"
    ),
}


class FakeEngine:
    """The engine's logic (no HTTP): probe look-up, generation, parsing, faults."""

    def __init__(
        self,
        probes: Sequence[ProbeCase] | None = None,
        faults: Iterable[str] = (),
        adapter: str = "reference",
        model: str | None = None,
        api_key: str | None = None,
    ) -> None:
        from k2conform.adapter.registry import create_adapter, load
        from k2conform.delivery.tokenizer import load_tokenizer

        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)} (known: {', '.join(FAULTS)})")
        self.faults = frozenset(faults)
        self.api_key = api_key
        self.tokenizer = load_tokenizer()
        self.adapter = create_adapter(adapter)
        availability = load(self.adapter)
        if availability.status != "ok":
            raise RuntimeError(f"adapter {adapter}: {availability.status} {availability.reason}")
        self.format = self.adapter.formats[0]
        self.markup = FORMATS[self.format].markup
        self.model = model or f"kimi-{self.format}-fake"
        every = probes if probes is not None else load_corpus().probes
        self.probes = [p for p in every if p.format == self.format]
        self.lock = threading.Lock()  # adapters are not meant to be shared between threads
        self.requests = 0
        self._minted = itertools.count(1)  # the random parts of the ids it makes unique
        self.in_flight = 0  # streams being sent now (the concurrency fault's trigger)
        self.flight = threading.Lock()

    # --- generation -----------------------------------------------------------------------

    def model_output(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The probe replay for this conversation's turn (the turn = assistant messages after the
        probe's own)."""
        for probe in self.probes:
            n = len(probe.messages)
            if len(messages) >= n and all(
                _same(a, b) for a, b in zip(messages[:n], probe.messages)
            ):
                turn = sum(1 for m in messages[n:] if m.get("role") == "assistant")
                if turn < len(probe.replay):
                    return probe.replay[turn]
        return "I have no scripted answer for this conversation."

    def _chosen(self, text: str) -> str:
        """The model output after the model's own choices (``one-call-of-two``)."""
        markup = self.markup
        if "one-call-of-two" not in self.faults or text.count(markup.call_begin) < 2:
            return text
        second = text.find(markup.call_begin, text.find(markup.call_end) + 1)
        return text[:second] + text[text.find(markup.section_end) :]

    def complete(self, body: Mapping[str, Any]) -> tuple[Result, str]:
        """The parsed result of one request (whole), and the raw model output."""
        text = self._chosen(self.model_output(body.get("messages") or []))
        request = _request(body, self.format)
        delivery = modes.deliveries(text, "whole", self.tokenizer)[0]
        with self.lock:
            return execute(self.adapter, request, delivery), text

    def stream(self, body: Mapping[str, Any]) -> tuple[list[StreamEvent], str]:
        text = self._chosen(self.model_output(body.get("messages") or []))
        request = _request(body, self.format)
        deltas = modes.deliveries(text, "stream-token", self.tokenizer)[0].deltas
        with self.lock:
            try:
                return list(self.adapter.parse_stream(request, deltas)), text
            except Exception as error:  # noqa: BLE001 - a parser crash is a 500, as on a real server
                raise EngineError(500, f"parser failed: {error}") from error

    # --- the OpenAI shapes, with faults ------------------------------------------------------

    def _fault_calls(self, calls: Sequence[ToolCall], body: Mapping[str, Any]) -> list[ToolCall]:
        out = []
        for n, call in enumerate(calls):
            arguments = (
                call.arguments[:-1] if "arguments-not-json" in self.faults else call.arguments
            )
            out.append(ToolCall(call.name, arguments, self._call_id(call.id, call.name, n, body)))
        return out

    def _finish(self, has_calls: bool) -> str:
        return "tool_calls" if has_calls and "finish-stop-with-calls" not in self.faults else "stop"

    def chat_response(self, body: Mapping[str, Any]) -> dict[str, Any]:
        result, text = self.complete(body)
        if result.outcome != "ok":
            raise EngineError(500, f"parser failed: {result.error}")
        calls = self._fault_calls(result.tool_calls, body)
        content = result.content
        if "markers-in-content" in self.faults and calls:
            content = (content or "") + text[text.find(self.markup.section_begin) :]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "reasoning_content": result.reasoning,
        }
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        return {
            "id": f"chatcmpl-{self._next()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish(bool(calls)),
                }
            ],
            "usage": {
                "prompt_tokens": 1,
                "completion_tokens": len(text),
                "total_tokens": len(text) + 1,
            },
        }

    def chat_chunks(
        self, body: Mapping[str, Any], crowded: bool = False
    ) -> Iterable[dict[str, Any]]:
        """The chunks of a streamed reply; ``crowded``: another stream was in flight when this
        one started (only the concurrency fault reads it)."""
        events, text = self.stream(body)
        if crowded and "calls-lost-under-concurrency" in self.faults:
            events = [
                StreamEvent(content=e.content, reasoning=e.reasoning, tool_calls=()) for e in events
            ]
        if "arguments-held-back" in self.faults:
            events = _arguments_held_back(events)
        ident, created = f"chatcmpl-{self._next()}", int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }

        yield chunk({"role": "assistant", "content": ""})
        seen: dict[int, int] = {}
        if "markers-in-content" in self.faults and any(e.tool_calls for e in events):
            yield chunk({"content": text[text.find(self.markup.section_begin) :]})
        pending_cut: dict[int, bool] = {}
        for event in events:
            delta: dict[str, Any] = {}
            if event.content is not None:
                delta["content"] = event.content
            if event.reasoning is not None:
                delta["reasoning_content"] = event.reasoning
            if event.tool_calls:
                calls = []
                for d in event.tool_calls:
                    entry: dict[str, Any] = {"index": d.index}
                    if d.id is not None or (d.name is not None and d.index not in seen):
                        # a K3 call's first chunk carries no id: the engine mints it
                        entry["id"] = self._call_id(d.id, d.name or "", d.index, body)
                        entry["type"] = "function"
                    function: dict[str, Any] = {}
                    if d.name is not None:
                        function["name"] = d.name
                    if d.arguments is not None:
                        function["arguments"] = d.arguments
                        if "name-resent" in self.faults and d.name is None:
                            function["name"] = "again"
                    if function:
                        entry["function"] = function
                    calls.append(entry)
                    seen[d.index] = seen.get(d.index, 0) + 1
                    pending_cut[d.index] = True
                delta["tool_calls"] = calls
            if delta:
                yield chunk(delta)
        finish = self._finish(bool(seen))
        if "arguments-not-json" in self.faults and seen:
            # a stray fragment after the arguments: the concatenation is no longer JSON
            yield chunk(
                {"tool_calls": [{"index": i, "function": {"arguments": "}"}} for i in sorted(seen)]}
            )
        if "content-twice" in self.faults:
            sent = "".join(e.content for e in events if e.content)
            if sent:
                yield chunk({"content": sent})
        yield chunk({}, "stop_163586" if "raw-stop-finish" in self.faults else finish)
        if "chunk-after-finish" in self.faults:
            yield chunk({"content": ""})
        if include_usage:
            usage = {
                "prompt_tokens": 0,
                "completion_tokens": len(events),
                "total_tokens": len(events),
            }
            for _ in range(2 if "usage-twice" in self.faults else 1):
                yield {**chunk({}), "choices": [], "usage": usage}

    def sse_frames(self, chunks: Iterable[dict[str, Any]]) -> list[bytes]:
        """The SSE events of a streamed reply, ``data: [DONE]`` last, as vLLM frames them."""
        done = [] if "no-done" in self.faults else ["[DONE]"]
        return [
            f"data: {data}\n\n".encode("utf-8")
            for data in [json.dumps(c, ensure_ascii=False) for c in chunks] + done
        ]

    def tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        from k2conform.reference.render import DEFAULT_SYSTEM_PROMPT, render

        if "messages" in body:
            if self.format != markers.FORMAT:
                raise EngineError(404, f"this engine renders no {self.format} chat")
            text = render(
                body["messages"],
                body.get("tools") or [],
                bool(body.get("add_generation_prompt", True)),
            )
            if "no-default-system-newline" in self.faults:
                text = text.replace(
                    DEFAULT_SYSTEM_PROMPT + markers.IM_END + "\n",
                    DEFAULT_SYSTEM_PROMPT + markers.IM_END,
                    1,
                )
        else:
            text = body.get("prompt", "")
        tokens = [i for i, _ in self.tokenizer.tokenize_spans(text)]
        return {"count": len(tokens), "max_model_len": 131072, "tokens": tokens, "token_strs": None}

    def detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {"prompt": self.tokenizer.decode(list(body.get("tokens") or []))}

    def _call_id(self, parsed: str | None, name: str, index: int, body: Mapping[str, Any]) -> str:
        """A call's id as this engine sends it: ``call_<index>`` under ``renamed-id``; else the
        parser's (a K2 call's is the model's own), its masked random part
        (``RandomIds.MASK``) made unique, as the server's random ids are; else minted as
        Moonshot's API mints a K3 call's, ``NAME_<global index>`` (sgl-project/sglang#39897),
        counting the calls of the conversation's history first."""
        if "renamed-id" in self.faults:
            return f"call_{index}"
        if parsed is not None:
            return parsed.replace(RandomIds.MASK, f"{next(self._minted):016x}")
        history = sum(
            len(m.get("tool_calls") or ())
            for m in body.get("messages") or ()
            if m.get("role") == "assistant"
        )
        return f"{name}_{history + index}"

    def _next(self) -> int:
        with self.lock:
            self.requests += 1
            return self.requests


class EngineError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def _arguments_held_back(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """The events with each call's argument pieces withheld until its last one, which then
    carries them all; a call delta left with nothing to say goes."""
    last = {d.index: n for n, e in enumerate(events) for d in e.tool_calls if d.arguments}
    held: dict[int, str] = {}
    changed = []
    for n, event in enumerate(events):
        calls = []
        for d in event.tool_calls:
            if d.arguments:
                held[d.index] = held.get(d.index, "") + d.arguments
                d = d._replace(arguments=held[d.index] if last[d.index] == n else None)
            if d.id is not None or d.name is not None or d.arguments:
                calls.append(d)
        changed.append(event._replace(tool_calls=tuple(calls)))
    return changed


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("role") == b.get("role") and (a.get("content") or "") == (b.get("content") or "")


def _request(body: Mapping[str, Any], format: str) -> Request:
    tools = tuple(body.get("tools") or ())
    thinking = (body.get("chat_template_kwargs") or {}).get(
        "thinking", FORMATS[format].thinking_default
    )
    return Request(
        tools=tools,
        tool_choice=body.get("tool_choice") or ("auto" if tools else "none"),
        thinking=bool(thinking),
    )


def _handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet server
            pass

        def _json(self, status: int, data: Any) -> None:
            payload = json.dumps(data, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _error(self, status: int, message: str) -> None:
            self._json(
                status,
                {"error": {"message": message, "type": "invalid_request_error", "code": status}},
            )

        def _authorised(self) -> bool:
            if engine.api_key is None:
                return True
            if self.headers.get("Authorization") == f"Bearer {engine.api_key}":
                return True
            self._error(401, "invalid API key")
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if not self._authorised():
                return
            if self.path.rstrip("/") == "/v1/models":
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": engine.model, "object": "model", "owned_by": "k2conform"}],
                    },
                )
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as error:
                self._error(400, f"body is not JSON: {error}")
                return
            path = self.path.rstrip("/")
            try:
                if path == "/v1/chat/completions":
                    if body.get("model") != engine.model:
                        self._error(404, f"the model {body.get('model')!r} does not exist")
                    elif body.get("stream"):
                        with engine.flight:
                            crowded = engine.in_flight > 0
                            engine.in_flight += 1
                        try:
                            if "calls-lost-under-concurrency" in engine.faults:
                                time.sleep(0.2)  # a stream takes a while, as on a real engine
                            self._sse(engine.chat_chunks(body, crowded))
                        finally:
                            with engine.flight:
                                engine.in_flight -= 1
                    else:
                        self._json(200, engine.chat_response(body))
                elif path in ("/tokenize", "/detokenize") and "no-tokenize" not in engine.faults:
                    self._json(
                        200,
                        engine.tokenize(body) if path == "/tokenize" else engine.detokenize(body),
                    )
                else:
                    self._error(404, f"no route {self.path}")
            except EngineError as error:
                self._error(error.status, str(error))

        def _sse(self, chunks: Iterable[dict[str, Any]]) -> None:
            chunks = list(chunks)  # errors before the first byte are a status code, as in vLLM
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for frame in engine.sse_frames(chunks):
                self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

    return Handler


class Server:
    """The fake engine on loopback, in a background thread: ``with Server(...) as url:``."""

    def __init__(self, engine: FakeEngine, host: str = "127.0.0.1", port: int = 0) -> None:
        """Binds at once; a port in use, an unknown host or a port out of range is a UsageError
        naming ``host:port`` and the system's reason (the user chose them)."""
        self.engine = engine
        try:
            self.httpd = ThreadingHTTPServer((host, port), _handler(engine))
        except (OSError, OverflowError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise UsageError(f"cannot serve on {host}:{port}: {reason}") from None
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
