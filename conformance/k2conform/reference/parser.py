"""The reference parser: one incremental state machine for one-shot and streaming parses.

One-shot parsing is ``feed(whole_text)`` then ``finish()``; streaming is ``feed`` per
delta then ``finish``.  The machine never rescans what it has consumed: it keeps only
a held-back tail that might still become a marker (at most one marker long), so any
split of the input gives the same result and the total work is linear in its length.
The choices the spec leaves open are named in :mod:`k2conform.reference.policies`.

Speed (``k2conform bench``) comes from taking text in runs, never changing what the machine
decides: each state skips in one step (``str.find`` or one compiled regex) to the next
character that can matter there (a ``<`` that can begin one of its markers; in arguments
also a quote or a backslash that can change the string state), and the events of one
delta are merged once, when the delta ends.  A run is handed on exactly as the
character-by-character steps would have handed on its pieces, so the results, the
policies and the stream events are the same for any split of the input.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from k2conform import markers
from k2conform.model import Request, Result, StreamEvent, ToolCall, ToolCallDelta, tool_name


class State(str, enum.Enum):
    """The scanner's state.  A ``str`` enum: the per-state tables are looked up on every
    marker, and ``Enum.__hash__`` is a Python call where ``str``'s is not."""

    THINK = "think"
    TEXT = "text"
    SECTION = "section"
    HEADER = "header"
    ARGS = "args"
    DONE = "done"


_SECTION_BEGINS = (markers.SECTION_BEGIN, markers.SECTION_BEGIN_SINGULAR)
_SECTION_ENDS = (markers.SECTION_END, markers.SECTION_END_SINGULAR)
#: Markers that only make sense inside a section: outside one they are dropped, never text.
_STRAY_OUTSIDE_SECTION = (*_SECTION_ENDS, markers.ARGUMENT_BEGIN, markers.CALL_END)

#: The markers each state reacts to; any other text there is that state's text.
_STATE_MARKERS: dict[State, tuple[str, ...]] = {
    State.THINK: (
        markers.THINK_END,
        *_SECTION_BEGINS,
        markers.CALL_BEGIN,
        markers.IM_END,
        *_STRAY_OUTSIDE_SECTION,
    ),
    State.TEXT: (*_SECTION_BEGINS, markers.CALL_BEGIN, markers.IM_END, *_STRAY_OUTSIDE_SECTION),
    State.SECTION: (
        markers.CALL_BEGIN,
        *_SECTION_ENDS,
        markers.IM_END,
        markers.ARGUMENT_BEGIN,
        markers.CALL_END,
        *_SECTION_BEGINS,
    ),
    State.HEADER: (
        markers.ARGUMENT_BEGIN,
        markers.CALL_BEGIN,
        *_SECTION_ENDS,
        markers.CALL_END,
        markers.IM_END,
        *_SECTION_BEGINS,
    ),
    State.ARGS: (
        markers.CALL_END,
        markers.CALL_BEGIN,
        *_SECTION_ENDS,
        markers.IM_END,
        markers.ARGUMENT_BEGIN,
        *_SECTION_BEGINS,
    ),
}
#: Per state, the next "<" that can begin one of its markers (or the data ends after it);
#: any other "<" is text of the state.
_STATE_MARKER_START: dict[State, re.Pattern[str]] = {
    state: re.compile("<(?:(?=[" + re.escape("".join(sorted({m[1] for m in tokens}))) + r"])|\Z)")
    for state, tokens in _STATE_MARKERS.items()
}


@dataclass(frozen=True)
class _Markers:
    """One state's markers as :func:`_marker_at` reads them: the first that matches in the
    state's order, and every proper prefix of one (text that may still grow into one)."""

    first: re.Pattern[str]
    prefixes: frozenset[str]
    longest: int
    own: dict[str, str]  #: a matched marker -> the markers module's own object of it

    @classmethod
    def of(cls, tokens: Sequence[str]) -> _Markers:
        return cls(
            re.compile("|".join(re.escape(m) for m in tokens)),
            frozenset(m[:k] for m in tokens for k in range(1, len(m))),
            max(map(len, tokens)),
            {m: m for m in tokens},
        )


_STATE_MARKER_TABLES: dict[State, _Markers] = {
    state: _Markers.of(tokens) for state, tokens in _STATE_MARKERS.items()
}
#: The markers the arguments state meets without firing STRUCT.missing-call-end.
_CLOSE_OR_KEEP_ARGS = frozenset((markers.CALL_END, markers.ARGUMENT_BEGIN, *_SECTION_BEGINS))
#: Markers that end the arguments; inside a JSON string they are literal (ARGS.marker-in-string).
_ARGS_TERMINATORS = frozenset(
    (markers.CALL_END, markers.CALL_BEGIN, *_SECTION_ENDS, markers.IM_END)
)

_ARGS_OUTSIDE_STRING = re.compile(r'["<]')
_ARGS_INSIDE_STRING = re.compile(r'["\\<]')
# Runs of argument text that cannot hold a structural marker nor leave a string open, so
# the run is taken in one step.  Every marker of the arguments state begins with "<|"
# (so "<" followed by anything else is literal text); inside a string a backslash pairs
# only with a real JSON escape character (a lone one is a character of its own), and a
# backslash or "<" at the end of the data is left to the step that may hold it back.
# Written "unrolled" (plain characters in one run between the rarer items), which Python's re
# matches about 1.5 times faster than an alternation per character.  Greedy, not possessive:
# the classes exclude what follows each run, so a match never backtracks into one, and
# CPython 3.11.2's re (Debian 12's python3) lets "<" followed by "|" through a possessive
# repeat's lookahead, which ran the arguments over "<|tool_call_end|>".
_STRING_SPECIAL = r'(?:\\["\\/bfnrtu]|\\(?=[^"\\/bfnrtu])|<(?=[^|]))'
_STRING_BODY = r'[^"\\<]*(?:' + _STRING_SPECIAL + r'[^"\\<]*)*'
#: Inside a string: the string's characters up to its closing quote (not included).
_ARGS_STRING_RUN = re.compile(_STRING_BODY)
#: Outside strings: text and whole strings, ending outside a string.
_ARGS_RUN = re.compile(r'[^"<]*(?:(?:"' + _STRING_BODY + r'"|<(?=[^|]))[^"<]*)*')
#: Text this short (a streamed delta) is cheaper to take one step at a time than with a run.
_SHORT = 16
_WHITESPACE = " \t\r\n"
_JSON_ESCAPES = frozenset('"\\/bfnrtu')
_INDEX_SUFFIX = re.compile(r"\s*[0-9]+\s*")


@dataclass
class _Call:
    index: int
    id: str
    name: str
    infer: bool  # ID.foreign: the name is inferred from the arguments when the call ends
    args: list[str] = field(default_factory=list)


class ReferenceParser:
    """Incremental Kimi K2 parser.  ``feed`` returns the stream events of that delta."""

    def __init__(self, request: Request | None = None) -> None:
        request = request or Request()
        self._tools: dict[str, Mapping[str, Any]] = {
            tool_name(t): t["function"].get("parameters") or {} for t in request.tools
        }
        self._state = State.THINK if request.thinking else State.TEXT
        # REQUEST.tool-choice-none: calls are parsed as always (so the section's text stays
        # out of content) and withheld from the events and the result.
        self._withhold_calls = request.tool_choice == "none" and bool(request.tools)
        # REQUEST.force-nonempty-content: a reply that is only reasoning (no content, no
        # section) gives that reasoning as its content; streamed, the reasoning waits (in
        # _held_reasoning) until content or a section comes, or the output ends.
        template_kwargs = request.server_options.get("chat_template_kwargs") or {}
        self._force_nonempty = template_kwargs.get("force_nonempty_content") is True
        self._held_reasoning = DeltaEvents() if self._force_nonempty else None
        self._reasoning_as_content = False
        self._at_output_start = request.thinking
        self._pending = ""  # a held-back tail that may still become a marker
        self._header: list[str] = []
        self._calls: list[_Call] = []
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._delta = DeltaEvents()  # the events of the delta being read
        self._policies: dict[str, None] = {}
        # Arguments state
        self._in_string = False
        self._args_started = False
        self._args_whitespace = ""  # trailing whitespace outside strings, held until more comes
        self._held: list[str] | None = None  # args text after a marker inside a string
        self._markers_trusted = False
        self._section_seen = False
        if not request.thinking:
            self._fire("THINK.off")
        prefix = continued_message(request)
        if prefix:
            # REQUEST.continue-final-message: the reply goes on from the last assistant
            # message; it is read first, as the reply's start, and only what follows counts.
            self._fire("REQUEST.continue-final-message")
            self.feed(prefix)
            self._content.clear()
            self._reasoning.clear()
            # what the prefix held back was the prefix's, not the reply's
            self._held_reasoning = (
                DeltaEvents() if self._force_nonempty and not self._section_seen else None
            )

    # -- public API -------------------------------------------------------------------

    def feed(self, text: str) -> StreamEvent | None:
        if (
            self._in_string
            and self._state is State.ARGS
            and not self._pending
            and self._held is None
            and not _ARGS_INSIDE_STRING.search(text)
        ):
            # The hot path of a long streamed argument: plain text inside a JSON string,
            # exactly what _scan_args and _args_text would do with it, minus the calls.
            call = self._calls[-1]
            call.args.append(text)
            if call.infer or not text or self._withhold_calls:
                return None
            return StreamEvent(None, None, (ToolCallDelta(call.index, None, None, text),))
        data = self._pending + text if self._pending else text
        self._pending = ""
        self._scan(data, final=False)
        return self._drain()

    def finish(self) -> StreamEvent | None:
        data, self._pending = self._pending, ""
        if data.startswith("<") and self._state is not State.DONE:
            self._fire("STRUCT.partial-marker-at-end")
        self._scan(data, final=True)
        self._end_of_output()
        if self._held_reasoning is not None and self._reasoning and not self._answered():
            self._fire("REQUEST.force-nonempty-content")
            self._reasoning_as_content = True
        return self._drain(final=True)

    def result(self) -> Result:
        calls = tuple(
            ToolCall(name=c.name, arguments="".join(c.args), id=c.id)
            for c in self._calls
            if not self._withhold_calls
        )
        content, reasoning = "".join(self._content) or None, "".join(self._reasoning) or None
        if self._reasoning_as_content:
            content, reasoning = reasoning, None
        return Result(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            meta={"policies": list(self._policies)},
        )

    # -- scanning ---------------------------------------------------------------------

    def _scan(self, data: str, final: bool) -> None:
        pos = 0
        n = len(data)
        while pos < n and self._state is not State.DONE:
            if self._state is State.ARGS:
                pos = self._scan_args(data, pos, final)
                continue
            if self._at_output_start:
                if (
                    len(data) - pos < len(markers.THINK_BEGIN)
                    and markers.THINK_BEGIN.startswith(data[pos:])
                    and not final
                ):
                    self._pending = data[pos:]
                    return
                self._at_output_start = False
                if data.startswith(markers.THINK_BEGIN, pos):
                    self._fire("THINK.leading-open-tag")
                    pos += len(markers.THINK_BEGIN)
                    continue
            found = _STATE_MARKER_START[self._state].search(data, pos)
            if found is None:
                self._text(data[pos:])
                return
            i = found.start()
            if i > pos:
                self._text(data[pos:i])
            marker, need_more = _marker_at(data, i, _STATE_MARKER_TABLES[self._state], final)
            if need_more:
                self._pending = data[i:]
                return
            if marker is None:
                self._text("<")
                pos = i + 1
            else:
                pos = i + len(marker)
                self._marker(marker)

    def _scan_args(self, data: str, pos: int, final: bool) -> int:
        """Consume argument text up to the next structural marker; return the new position."""
        n = len(data)
        if self._held is None and n - pos > _SHORT:
            run = (_ARGS_STRING_RUN if self._in_string else _ARGS_RUN).match(data, pos).end()
            if run > pos:
                # One piece instead of several: _args_text treats a run that ends outside
                # a string exactly as its pieces one by one (leading whitespace dropped,
                # trailing whitespace held), and a string's characters are kept as they are.
                self._args_text(data[pos:run])
                if run == n:
                    return n
                pos = run
        pattern = _ARGS_INSIDE_STRING if self._in_string else _ARGS_OUTSIDE_STRING
        m = pattern.search(data, pos)
        if m is None:
            self._args_text(data[pos:])
            return n
        i = m.start()
        char = data[i]
        if char == "\\":
            if i + 1 >= n and not final:
                self._args_text(data[pos:i])
                self._pending = data[i:]
                return n
            # Only a real JSON escape pairs the backslash with the next character: `\<` is
            # no escape, so the `<` is still examined as the start of a marker.
            width = 2 if i + 1 < n and data[i + 1] in _JSON_ESCAPES else 1
            self._args_text(data[pos : i + width])
            return i + width
        if char == '"':
            self._args_text(data[pos : i + 1])
            if self._in_string and self._held is not None:
                self._commit_held()
            self._in_string = not self._in_string
            return i + 1
        marker, need_more = _marker_at(data, i, _STATE_MARKER_TABLES[State.ARGS], final)
        if need_more:
            self._args_text(data[pos:i])
            self._pending = data[i:]
            return n
        if marker is None:
            self._args_text(data[pos : i + 1])
            return i + 1
        if self._in_string and not self._markers_trusted and marker is not markers.IM_END:
            self._fire("ARGS.marker-in-string")
            self._args_text(data[pos:i])
            if marker in _ARGS_TERMINATORS and self._held is None:
                self._held = []
            self._args_text(marker)
            return i + len(marker)
        self._args_text(data[pos:i])
        self._marker(marker)
        return i + len(marker)

    # -- text of each state -----------------------------------------------------------

    def _text(self, text: str) -> None:
        if not text:
            return
        state = self._state
        if state is State.TEXT:
            self._content.append(text)
            self._delta.content.append(text)
            if self._section_seen:
                self._fire("STRUCT.text-after-section")
        elif state is State.THINK:
            self._reasoning.append(text)
            self._delta.reasoning.append(text)
        elif state is State.HEADER:
            self._header.append(text)
        elif state is State.SECTION and text.strip(_WHITESPACE):
            self._fire("STRUCT.section-noise")

    def _args_text(self, text: str) -> None:
        if not text:
            return
        if self._held is not None:
            self._held.append(text)
            return
        if not self._in_string:
            if not self._args_started:
                text = text.lstrip(_WHITESPACE)
                if not text:
                    return
            stripped = text.rstrip(_WHITESPACE)
            text, trailing = self._args_whitespace + stripped, text[len(stripped) :]
            self._args_whitespace = trailing
            if not stripped:
                self._args_whitespace = text + trailing
                return
        else:
            text, self._args_whitespace = self._args_whitespace + text, ""
        self._args_started = True
        call = self._calls[-1]
        call.args.append(text)
        if not call.infer:
            self._delta.args(call.index, text)

    def _commit_held(self) -> None:
        held, self._held = self._held or [], None
        for text in held:
            self._args_text(text)

    def _reinterpret_unterminated_string(self) -> None:
        """ARGS.unterminated-string: the swallowed marker was structural; parse the rest again."""
        self._fire("ARGS.unterminated-string")
        held, self._held = "".join(self._held or ()), None
        self._in_string = False
        self._markers_trusted = True
        self._scan(held, final=True)

    # -- markers ----------------------------------------------------------------------

    def _marker(self, marker: str) -> None:
        # ``marker`` is the markers module's own object (_marker_at hands out no other), so
        # identity is equality: the fuzz targets trace every ``==`` and none of ``is``.
        state = self._state
        if marker is markers.IM_END:
            self._end_of_output()
            self._fire("END.im-end")
            return
        if state in (State.TEXT, State.THINK):
            if marker in _STRAY_OUTSIDE_SECTION:
                self._fire("STRUCT.stray-marker")
                return
            if state is State.THINK:
                self._fire(
                    "THINK.end" if marker is markers.THINK_END else "THINK.implicit-end-at-section"
                )
                if marker is markers.THINK_END:
                    self._state = State.TEXT
                    return
            self._open_section(marker)
            if marker is markers.CALL_BEGIN:
                self._begin_header()
            return
        if state is State.ARGS and marker not in _CLOSE_OR_KEEP_ARGS:
            self._fire("STRUCT.missing-call-end")
        if marker is markers.CALL_BEGIN:
            self._end_call()
            self._begin_header()
        elif marker in _SECTION_ENDS:
            self._end_call()
            if marker is markers.SECTION_END_SINGULAR:
                self._fire("STRUCT.singular-section-markers")
            self._state = State.TEXT
        elif marker is markers.ARGUMENT_BEGIN and state is State.HEADER:
            self._begin_args()
        elif marker is markers.CALL_END and state in (State.ARGS, State.HEADER):
            self._end_call()
        else:
            self._fire("STRUCT.stray-marker")

    def _open_section(self, marker: str) -> None:
        if self._section_seen:
            self._fire("STRUCT.several-sections")
        self._section_seen = True
        if marker is markers.CALL_BEGIN:
            self._fire("STRUCT.call-without-section")
        elif marker is markers.SECTION_BEGIN_SINGULAR:
            self._fire("STRUCT.singular-section-markers")
        self._state = State.SECTION

    def _begin_header(self) -> None:
        self._header = []
        self._state = State.HEADER

    def _begin_args(self) -> None:
        raw_id = "".join(self._header)
        call_id = raw_id.strip(_WHITESPACE)
        if call_id != raw_id:
            self._fire("ID.whitespace")
        self._fire("ID.verbatim")
        self._fire("ARGS.raw")
        name, infer = self._resolve_name(call_id)
        call = _Call(index=len(self._calls), id=call_id, name=name, infer=infer)
        self._calls.append(call)
        if self._withhold_calls:
            self._fire("REQUEST.tool-choice-none")
        if not infer:
            self._delta.call(call.index, call.id, name)
        self._state = State.ARGS
        self._in_string = False
        self._args_started = False
        self._args_whitespace = ""
        self._held = None

    def _end_call(self) -> None:
        """Close whatever call is open: a header is dropped, arguments are kept."""
        if self._state is State.HEADER:
            self._fire("STRUCT.truncated-header")
            self._state = State.SECTION
        if self._state is not State.ARGS:
            return
        call = self._calls[-1]
        self._args_whitespace = ""
        arguments = "".join(call.args)
        if call.infer:
            call.name = self._infer_name(call.name, arguments)
            self._delta.call(call.index, call.id, call.name)
            if arguments:
                self._delta.args(call.index, arguments)
        if not arguments:
            self._fire("ARGS.empty")
        elif not _is_json(arguments):
            self._fire("ARGS.invalid-json")
        self._state = State.SECTION

    def _end_of_output(self) -> None:
        """The output is over (its end, or the end-of-turn token): close what is open."""
        if self._state is State.ARGS and self._held is not None:
            self._reinterpret_unterminated_string()
        self._close_at_end()

    def _close_at_end(self) -> None:
        state = self._state
        if state is State.ARGS:
            self._fire("STRUCT.missing-call-end")
        self._end_call()
        if state in (State.SECTION, State.HEADER, State.ARGS):
            self._fire("STRUCT.missing-section-end")
        elif state is State.THINK:
            self._fire("THINK.unterminated")
        self._state = State.DONE

    # -- names ------------------------------------------------------------------------

    def _resolve_name(self, call_id: str) -> tuple[str, bool]:
        """The function name the id carries, and whether to infer it from the arguments."""
        has_prefix = call_id.startswith("functions.")
        stem = call_id[len("functions.") :] if has_prefix else call_id
        if not has_prefix:
            self._fire("ID.no-prefix")
        base, colon, index = stem.rpartition(":")
        if colon and _INDEX_SUFFIX.fullmatch(index):
            name = base
            if ":" in base:
                self._fire("ID.colon-in-name")
            if has_prefix:
                self._fire("ID.standard")
        else:
            name = stem
            self._fire("ID.no-index")
        if "." in name:
            self._fire("ID.dotted-name")
        if not self._tools or name in self._tools:
            return name, False
        for suffix in _dotted_suffixes(name):
            if suffix in self._tools:
                return suffix, False
        if not has_prefix:
            self._fire("ID.foreign")
            return name, True
        self._fire("ID.undeclared-name")
        return name, False

    def _infer_name(self, fallback: str, arguments: str) -> str:
        """ID.foreign: the one declared tool that accepts the arguments, else the id stem."""
        try:
            args = json.loads(arguments)
        except (ValueError, RecursionError):
            args = None
        fits = [name for name, schema in self._tools.items() if _accepts(schema, args)]
        return fits[0] if len(fits) == 1 else fallback

    # -- events -----------------------------------------------------------------------

    def _fire(self, policy: str) -> None:
        self._policies.setdefault(policy, None)

    def _answered(self) -> bool:
        """Whether the reply has anything besides reasoning: content, or a tool-call section."""
        return bool(self._content) or self._section_seen

    def _release_reasoning(self, delta: DeltaEvents, final: bool) -> bool:
        """REQUEST.force-nonempty-content, streamed: until the reply is answered only reasoning
        comes, and it is held (False: nothing to send); then it goes out first, as reasoning,
        or at the end, as the content."""
        held = self._held_reasoning
        assert held is not None
        if not self._answered() and not final:
            held.reasoning.extend(delta.reasoning)
            delta.reasoning.clear()
            return False
        self._held_reasoning = None
        delta.reasoning[:0] = held.reasoning
        if self._reasoning_as_content:
            delta.content[:0] = delta.reasoning
            delta.reasoning.clear()
        return True

    def _drain(self, final: bool = False) -> StreamEvent | None:
        delta = self._delta
        if self._held_reasoning is not None and not self._release_reasoning(delta, final):
            return None
        if self._withhold_calls:
            delta.calls.clear()
        return delta.take()


class DeltaEvents:
    """What a parser read from one delta, merged as it comes into the OpenAI delta message it
    makes: content and reasoning each joined, and a call's header with the argument pieces
    that follow it one tool-call delta, its arguments joined once (linear in the delta's
    text).  Merged as read, not kept as a list of events and merged by kind afterwards: the
    fuzz targets trace every comparison the parser makes."""

    __slots__ = ("content", "reasoning", "calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[tuple[int, str | None, str | None, list[str]]] = []

    def call(self, index: int, call_id: str | None, name: str | None) -> None:
        """A call's header: its index, id and name."""
        self.calls.append((index, call_id, name, []))

    def args(self, index: int, text: str) -> None:
        """A piece of the arguments of call ``index``."""
        calls = self.calls
        if calls and calls[-1][0] == index:
            calls[-1][3].append(text)
        else:
            calls.append((index, None, None, [text]))

    def take(self) -> StreamEvent | None:
        """The delta message (None when there is nothing), and a fresh start."""
        content, reasoning, calls = self.content, self.reasoning, self.calls
        if not (content or reasoning or calls):
            return None
        self.content, self.reasoning, self.calls = [], [], []
        return StreamEvent(
            content="".join(content) if content else None,
            reasoning="".join(reasoning) if reasoning else None,
            tool_calls=tuple(
                ToolCallDelta(index=index, id=call_id, name=name, arguments="".join(pieces))
                for index, call_id, name, pieces in calls
            ),
        )


def _marker_at(data: str, i: int, table: _Markers, final: bool) -> tuple[str | None, bool]:
    """The marker starting at ``data[i]`` (the markers module's own object of it); or whether
    the text there may still become one."""
    found = table.first.match(data, i)
    if found is not None:
        return table.own[found.group()], False
    if final or len(data) - i >= table.longest:
        return None, False
    return None, data[i:] in table.prefixes


def _dotted_suffixes(name: str) -> Iterable[str]:
    parts = name.split(".")
    for k in range(1, len(parts)):
        yield ".".join(parts[k:])


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _accepts(schema: Mapping[str, Any], args: Any) -> bool:
    """A loose schema fit: an object with every required key and no unknown property."""
    if not isinstance(args, dict):
        return False
    properties = schema.get("properties") or {}
    if any(key not in args for key in schema.get("required") or ()):
        return False
    return not properties or all(key in properties for key in args)


def continued_message(request: Request) -> str | None:
    """With ``continue_final_message``, the text of the conversation's last message when it is
    the assistant's (the reply continues it), else None."""
    options = request.server_options
    messages = options.get("messages") or ()
    if not options.get("continue_final_message") or not messages:
        return None
    last = messages[-1]
    content = last.get("content")
    return content if last.get("role") == "assistant" and isinstance(content, str) else None


def parse(text: str, request: Request | None = None) -> Result:
    """One-shot parse of a complete model output."""
    parser = ReferenceParser(request)
    parser.feed(text)
    parser.finish()
    return parser.result()
