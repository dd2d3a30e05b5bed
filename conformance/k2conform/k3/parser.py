"""The Kimi K3 reference parser: one state machine for the one-shot and the streamed parse,
linear in the output, every open point of the format a named policy (:data:`POLICIES`).

The format (docs/k3.md): the output starts inside the channel the generation prompt opened
(``think`` with thinking on, ``response`` with it off); channels are
``<|open|>NAME<|sep|> ... <|close|>NAME<|sep|>``; a call is
``<|open|>call tool="NAME" index="N"<|sep|>`` and its arguments
``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>``, then
``<|close|>call<|sep|>``; the message ends with ``<|close|>message<|sep|>`` and
``<|end_of_msg|>``.  A value runs to the first ``<|close|>argument<|sep|>`` (the format has no
escape); ids are not in the output (the server mints them, parse cells do not judge them).
A call streams as it comes (vllm-project/vllm#50604: a client times out on arguments held to
the call's close): its name with its header, its arguments as a prefix of their JSON object,
a string value's text as it arrives, a typed value when its closer makes it whole.  The
one-shot parse builds the same text the same way.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

from k2conform.k3.markers import CLOSE, END_OF_MSG, MARKERS, OPEN, SEP, unescape
from k2conform.model import Request, Result, StreamEvent, ToolCall
from k2conform.reference.parser import DeltaEvents

POLICIES: dict[str, str] = {
    "K3.start": (
        "The output starts inside the channel the generation prompt opened: think with "
        "thinking on, response with it off."
    ),
    "K3.channel-ends-channel": (
        "A think, response or tools channel opened inside another channel ends that channel "
        "(the model skipped its closer: vllm-project/vllm#53246, #54273)."
    ),
    "K3.foreign-closer": (
        "The closer of a channel other than the open one ends the open one (a skipped think: "
        "`answer<|close|>response<|sep|>` with thinking on is reasoning; sgl-project/sglang "
        "PR #37743 reads it as the answer)."
    ),
    "K3.channel-order": (
        "A channel out of the order think, response, tools, or a second one of a kind, is read "
        "as it comes."
    ),
    "K3.outside-text": (
        "Text outside every channel, or inside tools but outside a call, is content: nothing "
        "the model wrote is lost."
    ),
    "K3.text-in-call": "Text inside a call but outside an argument is dropped.",
    "K3.unknown-tag": (
        "A tag the format does not define where it stands (a name with spaces from a "
        "detokenizer included, or a stray <|sep|>) is literal text where it stands."
    ),
    "K3.partial-tag-at-end": (
        "A marker or tag cut by the end of the output (after <|open|> or <|close|>, or a name "
        "before its <|sep|>) is dropped: a fragment of markup is never content."
    ),
    "K3.typed-value": "A value of type number, boolean, null, object or array is JSON.",
    "K3.typed-value-not-json": "A typed value that does not decode as JSON stays the raw string.",
    "K3.unknown-type": (
        "A type outside the six is decoded as JSON when it decodes, else kept raw; no type "
        "means string."
    ),
    "K3.duplicate-key": (
        "A key given twice is in the arguments twice, in order (a stream has sent the first "
        "already); a JSON reader keeps the last."
    ),
    "K3.call-without-tool": "A call without a non-empty tool attribute is dropped.",
    "K3.unclosed-call": (
        "A call the output ends inside, or another tag ends, is kept as far as it came (a "
        "stream has sent its name and arguments already): an open string value with its text "
        "so far, an open typed value dropped, the arguments object closed "
        "(vllm-project/vllm PR #50628 closes such calls the same way)."
    ),
    "K3.unclosed-channel": (
        "A channel the output or the message closer ends inside is closed there: its text "
        "counts, the closer never is content (vllm-project/vllm#51399)."
    ),
    "K3.index": (
        "The index attribute is the conversation's call counter, not the OpenAI index: calls "
        "are numbered by their order in the message."
    ),
    "K3.after-message": "Everything after <|close|>message<|sep|> or <|end_of_msg|> is dropped.",
    "K3.no-calls-allowed": (
        'With no tools declared or tool_choice "none", a tools channel is parsed as always '
        "and its calls withheld: no call, and none of its markup in content "
        "(sgl-project/sglang#39583)."
    ),
}

ARGUMENT_CLOSER = f"{CLOSE}argument{SEP}"
CHANNELS = ("think", "response", "tools")
TYPES = frozenset({"string", "number", "boolean", "null", "object", "array"})
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


class State(enum.Enum):
    THINK = "think"
    RESPONSE = "response"
    TOP = "top"
    TOOLS = "tools"
    CALL = "call"
    ARGUMENT = "argument"
    DONE = "done"


class K3Parser:
    """``feed`` a piece of output, get the delta it releases; ``finish`` at the end;
    ``result`` the whole reply."""

    def __init__(self, request: Request | None = None) -> None:
        request = request or Request()
        self._calls_allowed = bool(request.tools) and request.tool_choice != "none"
        self._state = State.THINK if request.thinking else State.RESPONSE
        self._pending = ""
        self._delta = DeltaEvents()
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._policies: list[str] = []
        self._fire("K3.start")
        self._tool: str | None = None  # the open call's tool attribute
        self._announced = False  # whether the open call is a call of the reply (and streams)
        self._arguments: list[str] = []  # its arguments' JSON text so far
        self._keys: set[str] = set()
        self._argument: tuple[str, str | None] = ("", None)  # the open argument's key, type
        self._value: list[str] = []  # a typed value's text (a string value streams)
        self._trailing: list[str] = []  # what came after the message's end
        self._furthest = CHANNELS.index(self._state.value)  # the latest channel in order seen

    # -- public API -------------------------------------------------------------------

    def feed(self, text: str) -> StreamEvent | None:
        data, self._pending = self._pending + text, ""
        self._scan(data, final=False)
        return self._drain()

    def finish(self) -> StreamEvent | None:
        data, self._pending = self._pending, ""
        self._scan(data, final=True)
        if self._state in (State.CALL, State.ARGUMENT):
            self._unclosed_call()
        elif self._state in (State.THINK, State.RESPONSE, State.TOOLS):
            self._fire("K3.unclosed-channel")
        self._state = State.DONE
        if "".join(self._trailing).replace(END_OF_MSG, "", 1):
            self._fire("K3.after-message")
        return self._drain()

    def result(self) -> Result:
        return Result(
            content="".join(self._content) or None,
            reasoning="".join(self._reasoning) or None,
            tool_calls=tuple(self._calls),
            meta={"policies": list(self._policies)},
        )

    # -- scanning ---------------------------------------------------------------------

    def _scan(self, data: str, final: bool) -> None:
        pos = 0
        ahead = _Ahead(data)
        while pos < len(data) and self._state is not State.DONE:
            if self._state is State.ARGUMENT:
                pos = self._scan_value(data, pos, final)
                continue
            start = data.find("<|", pos)
            if start < 0:
                held = not final and data.endswith("<")  # may begin a marker
                self._text(data[pos : len(data) - held])
                self._pending = data[len(data) - held :]
                return
            self._text(data[pos:start])
            marker = next((m for m in MARKERS if data.startswith(m, start)), None)
            if marker is None:
                if not final and any(m.startswith(data[start:]) for m in MARKERS):
                    self._pending = data[start:]
                    return
                self._text("<")
                pos = start + 1
                continue
            pos = self._marker(ahead, start, marker, final)
            if pos < 0:
                return
        if self._state is State.DONE:
            self._trailing.append(data[pos:])

    def _scan_value(self, data: str, pos: int, final: bool) -> int:
        """An argument value up to its closer; a tail that may begin the closer waits."""
        end = data.find(ARGUMENT_CLOSER, pos)
        if end >= 0:
            self._value_text(data[pos:end])
            self._end_argument()
            return end + len(ARGUMENT_CLOSER)
        held = 0 if final else _closer_prefix(data, pos)
        self._value_text(data[pos : len(data) - held])
        self._pending = data[len(data) - held :]
        return len(data)

    def _marker(self, ahead: _Ahead, start: int, marker: str, final: bool) -> int:
        """Act on the marker at ``start``; the position after it, or -1 when the rest waits."""
        data = ahead.data
        after = start + len(marker)
        if marker == END_OF_MSG:
            if self._state is State.CALL:
                self._unclosed_call()
            self._state = State.DONE
            return after
        if marker == SEP:
            self._fire("K3.unknown-tag")
            self._text(SEP)
            return after
        sep = ahead.find(SEP, after)
        interrupted = _next_marker(ahead, after, sep)
        if interrupted >= 0 or (sep < 0 and final):
            if interrupted < 0:  # the output ends inside the tag
                self._fire("K3.partial-tag-at-end")
                return len(data)
            self._fire("K3.unknown-tag")
            self._text(data[start:interrupted])
            return interrupted
        if sep < 0:
            self._pending = data[start:]
            return -1
        head = data[after:sep]
        if not self._tag(marker, head):
            self._fire("K3.unknown-tag")
            self._text(data[start : sep + len(SEP)])
        return sep + len(SEP)

    def _tag(self, marker: str, head: str) -> bool:
        """Act on the tag ``marker + head + SEP``; False when it means nothing here."""
        name, _, attributes = head.partition(" ")
        state = self._state
        if marker == CLOSE and name == "message" and not attributes:
            if state in (State.CALL, State.ARGUMENT):
                self._unclosed_call()
            elif state.value in CHANNELS:
                self._fire("K3.unclosed-channel")
            self._state = State.DONE
            return True
        if state is State.CALL:
            if marker == OPEN and name == "argument":
                attrs = _attributes(attributes)
                self._open_argument(attrs.get("key", ""), attrs.get("type"))
                return True
            if marker == CLOSE and name == "call" and not attributes:
                self._end_call()
                return True
            if name in ("call", "tools") + CHANNELS:
                self._unclosed_call()
                return self._tag(marker, head)
            return False
        if marker == OPEN and name in CHANNELS and not attributes:
            if state in (State.THINK, State.RESPONSE, State.TOOLS):
                self._fire("K3.channel-ends-channel")
            if CHANNELS.index(name) <= self._furthest:
                self._fire("K3.channel-order")
            self._furthest = max(self._furthest, CHANNELS.index(name))
            self._state = State(name)
            return True
        if marker == CLOSE and not attributes and name in CHANNELS and state.value in CHANNELS:
            if name != state.value:
                self._fire("K3.foreign-closer")
            self._state = State.TOP
            return True
        if state is State.TOOLS and marker == OPEN and name == "call":
            self._open_call(_attributes(attributes))
            return True
        return False

    # -- calls: streamed as they come, and built the same way whole -------------------

    def _open_call(self, attrs: dict[str, str]) -> None:
        """A call's header: the call is the reply's (and its name goes out) unless it has no
        tool or no call is allowed; those are parsed alike and withheld."""
        self._state = State.CALL
        self._tool, self._arguments, self._keys = attrs.get("tool"), [], set()
        self._announced = bool(self._tool) and self._calls_allowed
        if not self._announced:
            return
        index = len(self._calls)
        if attrs.get("index") not in (None, str(index + 1)):
            self._fire("K3.index")
        self._delta.call(index, None, self._tool)

    def _open_argument(self, key: str, kind: str | None) -> None:
        self._state = State.ARGUMENT
        self._argument, self._value = (key, kind), []
        if key in self._keys:
            self._fire("K3.duplicate-key")
        self._keys.add(key)
        if kind is None:
            self._fire("K3.unknown-type")
        if self._streams_value:
            self._argument_text(f'{self._key_prefix(key)}"')

    @property
    def _streams_value(self) -> bool:
        """Whether the open argument's value is raw text (a string, or no type): it streams,
        escaped, as it arrives; a typed value goes out whole."""
        return self._argument[1] in (None, "string")

    def _value_text(self, text: str) -> None:
        if not text:
            return
        if self._streams_value:
            self._argument_text(json.dumps(text, ensure_ascii=False)[1:-1])
        else:
            self._value.append(text)

    def _end_argument(self) -> None:
        """An argument's closer: a string value's closing quote, or a typed value, whole."""
        self._state = State.CALL
        key, kind = self._argument
        if self._streams_value:
            self._argument_text('"')
            return
        self._fire("K3.typed-value" if kind in TYPES else "K3.unknown-type")
        raw = "".join(self._value)
        value: Any = raw
        try:
            value = json.loads(raw)
        except ValueError:
            self._fire("K3.typed-value-not-json")
        self._argument_text(self._key_prefix(key) + json.dumps(value, ensure_ascii=False))

    def _key_prefix(self, key: str) -> str:
        """What comes before an argument's value: the object's opening or a separator."""
        return ("{" if not self._arguments else ", ") + json.dumps(key, ensure_ascii=False) + ": "

    def _argument_text(self, text: str) -> None:
        self._arguments.append(text)
        if self._announced:
            self._delta.args(len(self._calls), text)

    def _end_call(self) -> None:
        self._state = State.TOOLS
        self._argument_text("}" if self._arguments else "{}")
        if not self._tool:
            self._fire("K3.call-without-tool")
        elif not self._calls_allowed:
            self._fire("K3.no-calls-allowed")
        else:
            self._calls.append(ToolCall(name=self._tool, arguments="".join(self._arguments)))

    def _unclosed_call(self) -> None:
        """A call ended before its closer: kept as far as it came (``K3.unclosed-call``)."""
        self._fire("K3.unclosed-call")
        if self._state is State.ARGUMENT:
            if self._streams_value:
                self._argument_text('"')
            self._state = State.CALL
        self._end_call()

    def _text(self, text: str) -> None:
        if not text:
            return
        state = self._state
        if state is State.THINK:
            self._reasoning.append(text)
            self._delta.reasoning.append(text)
        elif state is State.CALL:
            self._fire("K3.text-in-call")
        elif state is not State.DONE:
            if state in (State.TOP, State.TOOLS):
                self._fire("K3.outside-text")
            self._content.append(text)
            self._delta.content.append(text)

    def _fire(self, policy: str) -> None:
        if policy not in self._policies:
            self._policies.append(policy)

    def _drain(self) -> StreamEvent | None:
        return self._delta.take()


def _attributes(text: str) -> dict[str, str]:
    return {key: unescape(value) for key, value in _ATTRIBUTE.findall(text)}


def _next_marker(ahead: _Ahead, start: int, stop: int) -> int:
    """Where a marker other than ``<|sep|>`` begins in ``data[start:stop]`` (stop < 0: to the
    end); -1 when none does."""
    end = len(ahead.data) if stop < 0 else stop
    found = [ahead.find(m, start, end) for m in (OPEN, CLOSE, END_OF_MSG)]
    return min((f for f in found if f >= 0), default=-1)


class _Ahead:
    """The next place of each marker in one scanned text, searched for again only once the
    scan has passed it.  The scan only moves forward, so the text is searched about once per
    marker: a fresh ``find`` from every tag would read the rest of the text each time, which
    is quadratic on a run of tags that never reach their ``<|sep|>``."""

    def __init__(self, data: str) -> None:
        self.data = data
        self._next: dict[str, tuple[int, int]] = {}  # marker -> (searched from, found at)

    def find(self, marker: str, start: int, end: int | None = None) -> int:
        """``data.find(marker, start, end)``."""
        known = self._next.get(marker)
        if known is None or known[0] > start or 0 <= known[1] < start:
            known = self._next[marker] = (start, self.data.find(marker, start))
        at = known[1]
        return at if at >= 0 and (end is None or at + len(marker) <= end) else -1


def _closer_prefix(data: str, pos: int) -> int:
    """How many characters at the end of ``data[pos:]`` may begin :data:`ARGUMENT_CLOSER`."""
    for size in range(min(len(ARGUMENT_CLOSER) - 1, len(data) - pos), 0, -1):
        if ARGUMENT_CLOSER.startswith(data[len(data) - size :]):
            return size
    return 0


def parse(text: str, request: Request | None = None) -> Result:
    """One-shot parse of a complete K3 model output."""
    parser = K3Parser(request)
    parser.feed(text)
    parser.finish()
    return parser.result()
