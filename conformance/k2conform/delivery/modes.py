"""Delivery modes: how a case's model output reaches an adapter.

Two families.  *Token-aligned* modes (``whole``, ``stream-token``, ``stream-burst``)
start from a tokenisation of the output (the stand-in Kimi tokenizer or the real one)
and send each delta with its token ids, as an engine does: a marker is one token, and a
token whose bytes are an incomplete UTF-8 character adds no text (an incremental
detokenizer holds them back), so a delta can be an empty string with an id.
Every mode delivers what a server hands its parser: the output up to, not including, the
first ``<|im_end|>`` (the end-of-turn token stops generation and is stripped).
*Text-level* modes (``stream-char``, ``stream-marker-split``, ``stream-random``,
``stream-recorded``) cut the text anywhere, markers included, and send no token ids, as
a text-only replay or a re-chunking proxy does; an engine never splits a marker token.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, Sequence

from k2conform import formats
from k2conform import markers
from k2conform.model import Delta

if TYPE_CHECKING:  # the contract names the delivery modes: typing only, no import cycle
    from k2conform.adapter.contract import Adapter
    from k2conform.case.corpus import CompletionCase


@dataclass(frozen=True)
class Mode:
    """One delivery mode: what it sends, and when a run plans it."""

    name: str
    description: str
    #: Each delta carries its token ids and no marker token is split (else: the text cut
    #: anywhere, no ids, as a text replay or a proxy sends it).
    token_aligned: bool
    #: Only a server adapter takes it (the server tokenizes, detokenizes and streams).
    server: bool = False
    #: A run makes it only when asked (``--delivery``, or ``--opt-in`` beside the planned ones).
    opt_in: bool = False
    #: A run that names no mode plans it (``stream-recorded`` only replays cases that recorded
    #: deltas, and is asked for).
    default: bool = True
    #: Its deltas are drawn from the run's ``--seed`` (recorded with the result).
    seeded: bool = False

    @property
    def streaming(self) -> bool:
        return self.name not in ("whole", "server-whole")


MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (
        Mode("whole", "the complete output, through the one-shot API", True),
        Mode("stream-token", "one token per delta, as an engine streams it", True),
        Mode(
            "stream-burst",
            "BURST tokens per delta (default 4), as speculative decoding streams it",
            True,
        ),
        Mode(
            "stream-after-cutoff",
            "one token per delta, right after another stream through the same adapter was cut "
            "off inside a call's arguments (nothing one request leaves behind may reach the next)",
            True,
            opt_in=True,
            default=False,
        ),
        Mode(
            "stream-coalesced",
            "1 to 8 tokens per delta, the counts drawn from the recorded seed (3 variants), as "
            "vLLM's output collector merges a request's outputs while the server falls behind "
            "under concurrent load (vllm-project/vllm#54701)",
            True,
            opt_in=True,
            default=False,
            seeded=True,
        ),
        Mode(
            "stream-interleaved",
            "one token per delta, stepped in turn with another stream through a second parser "
            "state of the same adapter (two calls of the case's first tool, spread over this "
            "stream's length); each must send what it sends alone (a server parses many "
            "requests at once: nothing one stream does may reach another)",
            True,
            opt_in=True,
            default=False,
        ),
        Mode(
            "stream-holdback",
            "one token per delta, its text held back 11 characters (variants: 32; 11 with 3 "
            "tokens a step, as speculative decoding) until later tokens or the end-of-turn "
            "token's output release it, as vLLM's detokenizer streams a request with stop "
            "strings: a marker's id can arrive before its text",
            True,
            opt_in=True,
            default=False,
        ),
        Mode("stream-char", "one character per delta (text-level, no token ids)", False),
        Mode(
            "stream-marker-split",
            "9 streams that together cut every marker at every inner offset; text between "
            "markers in one delta (text-level)",
            False,
        ),
        Mode(
            "stream-random",
            "seeded random cut points; the seed is recorded with the result (text-level)",
            False,
            seeded=True,
        ),
        Mode(
            "stream-recorded",
            "the case's own recorded deltas, only cases that have them (text-level)",
            False,
            default=False,
        ),
        Mode(
            "server-whole",
            "the output's token ids forced through a real server, reply not streamed (server "
            "adapters only)",
            True,
            server=True,
            default=False,
        ),
        Mode(
            "server-stream",
            "the output's token ids forced through a real server, reply streamed over SSE "
            "(server adapters only)",
            True,
            server=True,
            default=False,
        ),
        Mode(
            "server-concurrent",
            "server-stream, then the same request CONCURRENT_STREAMS (8) times at once; each "
            "stream must give what the one alone gave (vllm-project/vllm#54701: calls lost "
            "under 6-14 concurrent streams; server adapters only)",
            True,
            server=True,
            opt_in=True,
            default=False,
        ),
    )
}
#: Modes only a server adapter (one with ``delivery_modes``) takes: the server tokenizes,
#: detokenizes and streams by itself, so the delta is the whole script of token ids.
SERVER_MODES = tuple(name for name, mode in MODES.items() if mode.server)
#: Not a delivery mode: the column ``k2conform grammar`` adds (an engine's own grammar against its
#: own parser, docs/grammar.md).  What its grammar admits reaches the parser token-aligned.
GRAMMAR_MODE = "grammar"
#: The engines of the ``grammar`` column (``k2conform grammar --engine``): per engine, the adapter
#: whose grammar and parser each format's cases go through.
GRAMMAR_ENGINES = {
    "vllm": {"k2": "vllm", "k3": "vllm-k3"},
    "sglang": {"k2": "sglang", "k3": "sglang-k3"},
}


def grammar_engine(adapter: str) -> str:
    """The engine whose grammar a ``grammar`` cell of this adapter checked (the adapter's own
    name when it is no engine's)."""
    return next((e for e, by in GRAMMAR_ENGINES.items() if adapter in by.values()), adapter)


TOKEN_ALIGNED_MODES = (
    *(name for name, mode in MODES.items() if mode.token_aligned),
    GRAMMAR_MODE,
)
#: Deliveries that cut the text without regard to tokens, as a text replay or a proxy does.
TEXT_LEVEL_MODES = tuple(name for name, mode in MODES.items() if not mode.token_aligned)
#: ``stream-after-cutoff`` and ``stream-interleaved`` are known to equal ``stream-token`` cell for
#: cell, and the release lanes' baselines were reviewed without ``stream-holdback`` and
#: ``stream-coalesced`` (docs/cli.md, Delivery modes).
OPT_IN_MODES = tuple(name for name, mode in MODES.items() if mode.opt_in)
DEFAULT_MODES = tuple(name for name, mode in MODES.items() if mode.default)
#: The modes whose deltas the run's ``--seed`` draws.
SEEDED_MODES = tuple(name for name, mode in MODES.items() if mode.seeded)
#: The modes that hand over the whole output at once, through the one-shot API.
ONE_SHOT_MODES = tuple(name for name, mode in MODES.items() if not mode.streaming)


def adapter_modes(adapter: Adapter) -> tuple[str, ...]:
    """The modes an adapter takes: its ``delivery_modes``, else every non-server mode
    (``stream-holdback`` only where its server holds text back, ``stop_string_holdback``;
    ``stream-interleaved`` only where it opens a stream to feed a delta at a time)."""
    if adapter.delivery_modes:
        return tuple(adapter.delivery_modes)
    lacks = {
        "stream-holdback": not adapter.stop_string_holdback,
        "stream-interleaved": not adapter.opens_streams,
    }
    return tuple(m for m in MODES if m not in SERVER_MODES and not lacks.get(m, False))


def planned_modes(adapter: Adapter, opt_in: Sequence[str] = ()) -> tuple[str, ...]:
    """The modes a run gives an adapter when none is asked for: those it takes, less the
    opt-in ones not in ``opt_in``."""
    return tuple(m for m in adapter_modes(adapter) if m not in OPT_IN_MODES or m in opt_in)


#: The stream ``stream-after-cutoff`` sends first and does not judge: a call cut off inside its
#: arguments, the most a parser holds at the moment a client goes away (``{tool}``: the case's
#: first declared tool, so the earlier request is one the same server could have had).
CUTOFF_PRELUDE = (
    f"{markers.SECTION_BEGIN}{markers.CALL_BEGIN}functions.{{tool}}:0{markers.ARGUMENT_BEGIN}"
    '{{"city": "Par'
)


def partner_output(format: str, tool: str) -> str:
    """The other stream of ``stream-interleaved``: a short answer, then two complete calls of
    ``tool`` (so that it has a call open while this stream has one), in the case's format."""
    return formats.FORMATS[format].partner(tool)


#: The prelude's tool when a case declares none.
CUTOFF_TOOL = "get_weather"
DEFAULT_BURST = 4
#: ``stream-holdback``'s variants, (lag, tokens a step): vLLM holds back ``max(len(stop)) - 1``
#: characters of text while a stop string could still match (``v1/engine/detokenizer.py``,
#: ``stop_buffer_length``) and sends every token id at once.  11 is ``stop=["Observation:"]``,
#: a ReAct agent's stop; 32 is a stop string longer than the longest marker (28 characters),
#: so that every marker's id goes out before any of its text.  The third is the ReAct stop
#: with speculative decoding: an engine step accepts several tokens, the detokenizer takes
#: them together (``IncrementalDetokenizer.update`` over the step's new ids) and the step's
#: output carries all their ids with the text released after the last.
HOLDBACKS = ((11, 1), (32, 1), (11, 3))
DEFAULT_SEED = 20261130
#: ``stream-coalesced``: its variants (seeds ``seed`` … ``seed + 2``) and the most tokens an
#: output merges (a step of 8 tokens is a consumer 8 engine steps behind).
COALESCED_VARIANTS = 3
MOST_COALESCED = 8
#: ``server-concurrent``: the streams in flight at once (vllm-project/vllm#54701 saw calls lost
#: from 6 to 14; the real vLLM server on CPU schedules 16 at a time)
CONCURRENT_STREAMS = 8
MARKER_SPLIT_STRIDE = 9


class Tokenizer(Protocol):
    def tokenize_spans(self, text: str, spelled: Sequence[int] = ()) -> list[tuple[int, str]]: ...


@dataclass(frozen=True)
class Delivery:
    """One way of feeding an output: the mode, the variant within it, and the deltas."""

    mode: str
    deltas: tuple[Delta, ...]
    variant: str = ""
    seed: int | None = None
    #: Sent through the same adapter first, its result not judged (``stream-after-cutoff``).
    prelude: tuple[Delta, ...] = ()
    #: Stepped in turn with ``deltas`` through a second stream of the same adapter
    #: (``stream-interleaved``); both must send what they send alone.
    partner: tuple[Delta, ...] = ()
    #: A server mode's longest token: its one delta is generated by the server's engine a
    #: token a step (None: the deltas are what the parser is handed)
    longest_token: int | None = None
    #: Sent this many times at once, after once alone (``server-concurrent``; 0: once)
    copies: int = 0
    #: The output's format (``k2conform.formats``): which marker bytes must not reach content.
    format: str = markers.FORMAT

    @property
    def leaks(self) -> tuple[str, ...]:
        """The marker texts a content delta of this output must not carry."""
        return formats.FORMATS[self.format].leak_markers

    @property
    def fed(self) -> int:
        """The longest piece of output the parser is handed at once (the liveness check's
        scale, ``judge.stream.HELD_BACK``)."""
        if self.longest_token is not None:
            return self.longest_token
        return max((len(d.text) for d in self.deltas), default=0)

    @property
    def label(self) -> str:
        return f"{self.mode}[{self.variant}]" if self.variant else self.mode

    @property
    def streaming(self) -> bool:
        """Whether the deltas go to the streaming API (the benchmark's own deliveries, such as
        ``stream-4char``, are streams too)."""
        return self.mode not in ONE_SHOT_MODES


def engine_output(text: str) -> str:
    """What a server hands its parser: generation stops at the end-of-turn token
    ``<|im_end|>`` (Kimi K2's eos), which is stripped, so nothing from it on is delivered."""
    end = text.find(markers.IM_END)
    return text if end < 0 else text[:end]


def case_seed(base_seed: int, case_id: str) -> int:
    """A stable per-case seed: the same run seed and case id give the same splits anywhere."""
    digest = hashlib.sha256(f"{base_seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def case_deliveries(
    case: CompletionCase, mode: str, tokenizer: Tokenizer, *, seed: int, burst: int = DEFAULT_BURST
) -> list[Delivery]:
    """A case's deliveries in ``mode`` exactly as the matrix makes them (``seed``: the run's;
    each case draws from its own, :func:`case_seed`), so a report or a re-run of one cell
    delivers what its cell was judged on."""
    return deliveries(
        case.model_output,
        mode,
        tokenizer,
        seed=case_seed(seed, case.id),
        recorded=case.deltas,
        burst=burst,
        tool=cutoff_tool(case.request.tool_names),
        spelled=case.spelled_markers,
        format=case.format,
    )


def deliveries(
    text: str,
    mode: str,
    tokenizer: Tokenizer,
    *,
    seed: int = DEFAULT_SEED,
    recorded: Sequence[str] | None = None,
    burst: int = DEFAULT_BURST,
    tool: str = CUTOFF_TOOL,
    spelled: Sequence[int] = (),
    format: str = markers.FORMAT,
) -> list[Delivery]:
    """The deliveries of ``text`` in ``mode`` (marker splits give several; others one);
    ``tool`` names the call ``stream-after-cutoff``'s prelude cuts off and
    ``stream-interleaved``'s partner makes, in the case's ``format``; ``spelled``: the
    offsets of markers written from ordinary pieces (``CompletionCase.spelled_markers``).
    Each delivery carries the ``format``: the markers its stream judge looks for in content."""
    made = _deliveries(text, mode, tokenizer, seed, recorded, burst, tool, spelled, format)
    return [replace(delivery, format=format) for delivery in made]


def _deliveries(
    text: str,
    mode: str,
    tokenizer: Tokenizer,
    seed: int,
    recorded: Sequence[str] | None,
    burst: int,
    tool: str,
    spelled: Sequence[int],
    format: str,
) -> list[Delivery]:
    text = engine_output(text)
    spelled = tuple(at for at in spelled if at < len(text))
    if spelled and mode in TEXT_LEVEL_MODES:
        raise ValueError(f"{mode} sends no token ids: it cannot spell a marker")
    spans = tokenizer.tokenize_spans(text, spelled) if spelled else tokenizer.tokenize_spans(text)
    if "".join(piece for _, piece in spans) != text:
        raise ValueError("the tokenizer does not reproduce the text; cannot derive deltas")
    if mode in ("whole", *SERVER_MODES):
        longest = max((len(piece) for _, piece in spans), default=0)
        return [
            Delivery(
                mode,
                (Delta(text, tuple(i for i, _ in spans)),),
                longest_token=longest if mode in SERVER_MODES else None,
                copies=CONCURRENT_STREAMS if mode == "server-concurrent" else 0,
            )
        ]
    if mode == "stream-token":
        return [Delivery(mode, _per_token(spans))]
    if mode == "stream-after-cutoff":
        prelude = _per_token(tokenizer.tokenize_spans(CUTOFF_PRELUDE.format(tool=tool)))
        return [Delivery(mode, _per_token(spans), variant=f"after {tool}", prelude=prelude)]
    if mode == "stream-coalesced":
        return [
            Delivery(mode, _coalesced(spans, random.Random(seed + k)), f"seed={seed + k}", seed + k)
            for k in range(COALESCED_VARIANTS)
        ]
    if mode == "stream-interleaved":
        partner = _per_token(tokenizer.tokenize_spans(partner_output(format, tool)))
        return [Delivery(mode, _per_token(spans), variant=f"beside {tool}", partner=partner)]
    if mode == "stream-holdback":
        return [
            Delivery(mode, _held_back(spans, lag, step), variant=holdback_variant(lag, step))
            for lag, step in HOLDBACKS
        ]
    if mode == "stream-burst":
        deltas = tuple(_joined(spans[k : k + burst]) for k in range(0, len(spans), burst))
        return [Delivery(mode, deltas, variant=burst_variant(burst))]
    if mode == "stream-char":
        return [Delivery(mode, cut(text, range(1, len(text))))]
    if mode == "stream-random":
        rng = random.Random(seed)
        cuts, position = [], 0
        while position < len(text):
            position += rng.randint(1, 12)
            cuts.append(position)
        return [Delivery(mode, cut(text, cuts), variant=f"seed={seed}", seed=seed)]
    if mode == "stream-marker-split":
        return _marker_splits(text, spans, format)
    if mode == "stream-recorded":
        if recorded is None:
            return []
        bounds, position = [], 0
        for piece in recorded:
            position += len(piece)
            bounds.append(position)
        return [Delivery(mode, cut(text, bounds[:-1]))]
    raise ValueError(f"unknown delivery mode {mode!r} (known: {', '.join(MODES)})")


def cutoff_tool(tool_names: Sequence[str]) -> str:
    """The tool ``stream-after-cutoff``'s prelude calls: the case's first declared one."""
    return tool_names[0] if tool_names else CUTOFF_TOOL


def _per_token(spans: list[tuple[int, str]]) -> tuple[Delta, ...]:
    return tuple(Delta(piece, (i,)) for i, piece in spans)


def holdback_variant(lag: int, step: int) -> str:
    """A ``stream-holdback`` variant's label."""
    return f"stop buffer={lag}" + (f", {step} tokens a step" if step > 1 else "")


def burst_variant(burst: int) -> str:
    """A ``stream-burst`` variant's label."""
    return f"k={burst}"


def burst_of(label: str | None) -> int | None:
    """The tokens per delta of a ``stream-burst`` cell (its ``variant``, the delivery's
    :attr:`Delivery.label`), None for another mode: the one reader of :func:`burst_variant`."""
    prefix = "stream-burst[k="
    if not label or not label.startswith(prefix) or not label.endswith("]"):
        return None
    digits = label[len(prefix) : -1]
    return int(digits) if digits.isdigit() else None


def _coalesced(spans: list[tuple[int, str]], rng: random.Random) -> tuple[Delta, ...]:
    """Deltas of 1 to :data:`MOST_COALESCED` tokens each, with their ids: what a client reads
    when ``RequestOutputCollector.put`` merges the outputs its consumer has not taken yet
    (vllm/v1/engine/output_processor.py), so the count depends on the server's load."""
    deltas, k = [], 0
    while k < len(spans):
        group = spans[k : k + rng.randint(1, MOST_COALESCED)]
        deltas.append(_joined(group))
        k += len(group)
    return tuple(deltas)


def _joined(group: Sequence[tuple[int, str]]) -> Delta:
    """One delta of several tokens: their text and their ids."""
    return Delta("".join(piece for _, piece in group), tuple(i for i, _ in group))


def _held_back(spans: list[tuple[int, str]], holdback: int, step: int) -> tuple[Delta, ...]:
    """One delta per engine step of ``step`` tokens with their ids, releasing all but the
    last ``holdback`` characters produced so far; then the end-of-turn token's output, which
    adds no text (the stop token is not detokenised) and, finished, releases the rest
    (``get_next_output_text`` with ``finished``)."""
    if not spans:
        return ()
    deltas, produced, sent = [], "", 0
    for k in range(0, len(spans), step):
        group = spans[k : k + step]
        produced += "".join(piece for _, piece in group)
        upto = max(sent, len(produced) - holdback)
        deltas.append(Delta(produced[sent:upto], tuple(i for i, _ in group)))
        sent = upto
    deltas.append(Delta(produced[sent:], (markers.SPECIAL_TOKEN_IDS[markers.IM_END],)))
    return tuple(deltas)


def _marker_splits(text: str, spans: list[tuple[int, str]], format: str) -> list[Delivery]:
    """Every offset inside every marker is a delta boundary in exactly one of the streams.

    Stream k cuts every marker after its k-th, (k+STRIDE)-th, (k+2·STRIDE)-th …
    character, so STRIDE streams cover all split points of markers up to 3·STRIDE long
    (the longest is 28).  Text between markers travels as one delta, so a long argument
    costs one delta, not one per token: the mode is about the split points inside markers.
    """
    occurrences = []
    for marker in formats.FORMATS[format].split_markers:
        start = text.find(marker)
        while start >= 0:
            occurrences.append((start, marker))
            start = text.find(marker, start + len(marker))
    if not occurrences:
        return [
            Delivery("stream-marker-split", cut(text, _token_ends(spans)), variant="no markers")
        ]
    edges = {start for start, _ in occurrences} | {start + len(m) for start, m in occurrences}
    longest = max(len(m) for _, m in occurrences)
    streams = []
    for k in range(1, min(MARKER_SPLIT_STRIDE, longest - 1) + 1):
        offsets = range(k, longest, MARKER_SPLIT_STRIDE)
        cuts = edges | {start + o for start, m in occurrences for o in offsets if o < len(m)}
        label = "k=" + ",".join(str(o) for o in offsets)
        streams.append(Delivery("stream-marker-split", cut(text, sorted(cuts)), variant=label))
    return streams


def _token_ends(spans: list[tuple[int, str]]) -> list[int]:
    ends, position = [], 0
    for _, piece in spans:
        position += len(piece)
        ends.append(position)
    return ends


def cut_points(pieces: Sequence[str]) -> tuple[int, ...]:
    """The offsets between consecutive pieces: what :func:`cut` takes to give them back."""
    points, position = [], 0
    for piece in pieces[:-1]:
        position += len(piece)
        points.append(position)
    return tuple(points)


def cut(text: str, cuts: Sequence[int] | range) -> tuple[Delta, ...]:
    """Cut ``text`` at the given offsets into text-only deltas."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    return tuple(Delta(text[a:b]) for a, b in zip(bounds, bounds[1:]))
