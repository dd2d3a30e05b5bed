"""The template language of the case sources: ``${...}`` references and ``let`` constructs.

Strings are templates: ``${SB}`` ``${TB}`` ``${AB}`` ``${TE}`` ``${SE}`` ``${SB1}`` ``${SE1}``
``${IM_END}`` ``${IM_USER}``... ``${THINK}`` ``${THINK_END}`` are the markers (:data:`MARKERS`),
``${name}`` a variable, ``${name.0}`` / ``${name.key}`` a part of it, and ``${name|words}``
(``_`` to spaces), ``|repr``, ``|len``, ``|tuple`` a filter; a string that is one reference
stands for the value itself (a list, a number, a table).

A table with one of these keys is a construct, built when its ``let`` entry is (in order):

* drawn from the case's rng (or from ``random.Random(seed)`` with ``seed``): ``payload`` (a
  tool's realistic arguments), ``choice``, ``sample`` (``k``), ``shuffle``, ``randint``,
  ``calls`` (calls of the named tools with realistic arguments; ``start`` or ``indexes``),
  ``fill`` (a line drawn ``with`` fresh values, repeated ``until`` a length),
  ``random_base64``, ``random_cuts`` (``count``), ``random_bursts`` (``min``, ``max``);
* fixed: ``call`` (one call: the id, ``arguments`` and, where the id is not
  ``functions.NAME:IDX``, ``name``), ``json``, ``repeat`` (``times`` or ``length``), ``take``
  (``first``), ``cut`` (``at`` positions: a number or ``{find, offset, nth}``).

``call`` and ``calls`` make a :class:`Calls`: the call texts in a template, the calls they
intend in an ``expect``.
"""

from __future__ import annotations

import base64
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k2conform import markers
from k2conform.case.corpus import CorpusError, FieldChecker
from k2conform.case.payloads import dumps, payload
from k2conform.case.verdict import standard_id
from k2conform.model import ToolCall

_WHITESPACE = " \t\r\n"
MARKERS = {
    "SB": markers.SECTION_BEGIN,
    "SE": markers.SECTION_END,
    "TB": markers.CALL_BEGIN,
    "AB": markers.ARGUMENT_BEGIN,
    "TE": markers.CALL_END,
    "SB1": markers.SECTION_BEGIN_SINGULAR,
    "SE1": markers.SECTION_END_SINGULAR,
    "IM_END": markers.IM_END,
    "IM_USER": markers.IM_USER,
    "IM_ASSISTANT": markers.IM_ASSISTANT,
    "IM_SYSTEM": markers.IM_SYSTEM,
    "IM_MIDDLE": markers.IM_MIDDLE,
    "BOS": markers.BOS,
    "EOS": markers.EOS,
    "THINK": markers.THINK_BEGIN,
    "THINK_END": markers.THINK_END,
}
_REFERENCE = re.compile(r"\$\{([A-Za-z_]\w*)((?:\.\w+)*)(?:\|(\w+))?\}")
_FILTERS: dict[str, Callable[[Any], Any]] = {
    "words": lambda v: str(v).replace("_", " "),
    "repr": repr,
    "len": len,
    "tuple": lambda v: str(tuple(v)),
}


@dataclass(frozen=True)
class Calls:
    """Call texts and the calls they intend: text in a template, calls in ``expect``."""

    texts: tuple[str, ...]
    calls: tuple[ToolCall, ...]

    def __str__(self) -> str:
        return "".join(self.texts)

    def __getitem__(self, index: int) -> Calls:
        return Calls(self.texts[index : index + 1], self.calls[index : index + 1])


def _cut(text: str, points: Sequence[int]) -> list[str]:
    """``text`` in pieces at ``points`` (those outside the text are ignored)."""
    cuts = sorted({p for p in points if 0 < p < len(text)})
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False)]


class Scope:
    """The variables of one case: its ``let`` (bound in order), its row, the group's and shared."""

    def __init__(self, path: Path, layers: Sequence[Mapping[str, Any]]) -> None:
        self.path = path
        self.bound: dict[str, Any] = {}
        self._layers = [dict(layer) for layer in layers]
        self._busy: set[str] = set()

    def lookup(self, name: str, where: str) -> Any:
        if name in self.bound:
            return self.bound[name]
        for layer in self._layers:
            if name in layer:
                if name in self._busy:
                    raise CorpusError(self.path, where, f"variable {name!r} refers to itself")
                self._busy.add(name)
                value = self.value(layer[name], where)
                self._busy.discard(name)
                layer[name] = _Resolved(value)
                return value
        if name in MARKERS:
            return MARKERS[name]
        raise CorpusError(self.path, where, f"unknown variable ${{{name}}}")

    def value(self, raw: Any, where: str, rng: random.Random | None = None) -> Any:
        """``raw`` with every template filled in and every construct built (draws need ``rng``)."""
        if isinstance(raw, _Resolved):
            return raw.value
        if isinstance(raw, str):
            return self._template(raw, where)
        if isinstance(raw, list):
            return [self.value(item, f"{where}[{i}]") for i, item in enumerate(raw)]
        if isinstance(raw, dict):
            kinds = [k for k in raw if k in _CONSTRUCTS]
            if len(kinds) == 1:
                return _construct(self, kinds[0], raw, where, rng)
            return {self._template(k, where): self.value(v, f"{where}.{k}") for k, v in raw.items()}
        return raw

    def text(self, raw: Any, where: str) -> str:
        value = self.value(raw, where)
        if not isinstance(value, (str, Calls)):
            raise CorpusError(self.path, where, f"must be text, not {type(value).__name__}")
        return str(value)

    def _template(self, text: str, where: str) -> Any:
        whole = _REFERENCE.fullmatch(text)
        if whole:
            return self._reference(whole, where)

        def fill(match: re.Match) -> str:
            value = self._reference(match, where)
            if not isinstance(value, (str, int, Calls)) or isinstance(value, bool):
                raise CorpusError(
                    self.path, where, f"{match.group()} is a {type(value).__name__}, not text"
                )
            return str(value)

        return _REFERENCE.sub(fill, text)

    def _reference(self, match: re.Match, where: str) -> Any:
        name, path, filter_name = match.groups()
        value = self.lookup(name, where)
        for part in path.split(".")[1:]:
            try:
                value = value[int(part)] if isinstance(value, (list, Calls)) else value[part]
            except (KeyError, IndexError, TypeError, ValueError):
                raise CorpusError(self.path, where, f"{match.group()}: no part {part!r}") from None
        if filter_name is None:
            return value
        if filter_name not in _FILTERS:
            raise CorpusError(
                self.path,
                where,
                f"{match.group()}: no filter {filter_name!r} (filters: {', '.join(_FILTERS)})",
            )
        return _FILTERS[filter_name](value)


@dataclass(frozen=True)
class _Resolved:
    value: Any


def _construct(
    scope: Scope, kind: str, raw: Mapping[str, Any], where: str, rng: random.Random | None
) -> Any:
    options, draws = _CONSTRUCTS[kind]
    check = FieldChecker(scope.path)
    check.object(
        raw,
        where,
        {kind: True, **dict.fromkeys(options, False), **({"seed": False} if draws else {})},
    )
    if draws:
        if "seed" in raw:
            rng = random.Random(check.integer(raw["seed"], f"{where}.seed"))
        if rng is None:
            raise CorpusError(
                scope.path, where, f"{kind} draws at random: only a case's let may draw"
            )
    if kind == "fill":
        return _fill(rng, raw, scope, where)
    args = {
        key: scope.value(value, f"{where}.{key}") for key, value in raw.items() if key != "seed"
    }
    try:
        return _BUILDERS[kind](rng, args)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
        raise CorpusError(scope.path, where, f"bad {kind}: {error}") from None


def _calls(r: random.Random, args: Mapping[str, Any]) -> Calls:
    names = list(args["calls"])
    indexes = args.get("indexes", range(args.get("start", 0), args.get("start", 0) + len(names)))
    texts, calls = [], []
    for name, index in zip(names, indexes, strict=True):
        arguments = dumps(payload(name, r))
        call_id = f"functions.{name}:{index}"
        texts.append(
            markers.CALL_BEGIN + call_id + markers.ARGUMENT_BEGIN + arguments + markers.CALL_END
        )
        calls.append(ToolCall(name, arguments, call_id))
    return Calls(tuple(texts), tuple(calls))


def _call(_: Any, args: Mapping[str, Any]) -> Calls:
    call_id, arguments = args["call"], args["arguments"]
    written = standard_id(call_id)
    name = args.get("name") or (written[0] if written else None)
    if name is None:
        raise ValueError(f"{call_id!r} is not functions.NAME:IDX: give its name")
    text = markers.CALL_BEGIN + call_id + markers.ARGUMENT_BEGIN + arguments + markers.CALL_END
    return Calls(
        (text,), (ToolCall(name, arguments.strip(_WHITESPACE), call_id.strip(_WHITESPACE)),)
    )


def _position(text: str, spec: Any) -> int:
    if isinstance(spec, int):
        return spec
    at = -1
    for _ in range(spec.get("nth", 0) + 1):
        at = text.index(spec["find"], at + 1)
    return at + spec.get("offset", 0)


def _repeat(_: Any, args: Mapping[str, Any]) -> Any:
    unit = args["repeat"]
    if "length" in args:
        return (unit * (args["length"] // len(unit) + 1))[: args["length"]]
    return unit * args["times"]


def _fill(r: random.Random, raw: Mapping[str, Any], scope: Scope, where: str) -> str:
    """The ``fill`` line, each time with fresh ``with`` draws, until the text is ``until`` long."""
    until = FieldChecker(scope.path).integer(
        scope.value(raw.get("until"), f"{where}.until"), f"{where}.until"
    )
    draws = FieldChecker(scope.path).object(raw.get("with", {}), f"{where}.with", {}, strict=False)
    lines: list[str] = []
    while sum(map(len, lines)) < until:
        for name, value in draws.items():
            scope.bound[name] = scope.value(value, f"{where}.with.{name}", r)
        lines.append(scope.text(raw["fill"], f"{where}.fill"))
    return "".join(lines)


def _shuffled(r: random.Random, items: Sequence[Any]) -> list[Any]:
    shuffled = list(items)
    r.shuffle(shuffled)
    return shuffled


def _bursts(r: random.Random, args: Mapping[str, Any]) -> list[str]:
    text, cuts, at = args["random_bursts"], [], 0
    while at < len(text):
        at += r.randint(args["min"], args["max"])
        cuts.append(at)
    return _cut(text, cuts)


_BUILDERS: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {
    "payload": lambda r, a: dumps(payload(a["payload"], r)),
    "choice": lambda r, a: r.choice(a["choice"]),
    "sample": lambda r, a: r.sample(a["sample"], a["k"]),
    "shuffle": lambda r, a: _shuffled(r, a["shuffle"]),
    "randint": lambda r, a: r.randint(*a["randint"]),
    "calls": _calls,
    "random_base64": lambda r, a: base64.b64encode(r.randbytes(a["random_base64"])).decode("ascii"),
    "random_cuts": lambda r, a: _cut(
        a["random_cuts"],
        sorted(
            r.sample(range(1, len(a["random_cuts"])), min(len(a["random_cuts"]) - 1, a["count"]))
        ),
    ),
    "random_bursts": _bursts,
    "call": _call,
    "json": lambda _, a: dumps(a["json"]),
    "repeat": _repeat,
    "take": lambda _, a: list(a["take"])[: a["first"]],
    "cut": lambda _, a: _cut(a["cut"], [_position(a["cut"], p) for p in a["at"]]),
}
#: Each construct's options, and whether it draws at random.
_CONSTRUCTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "payload": ((), True),
    "choice": ((), True),
    "sample": (("k",), True),
    "shuffle": ((), True),
    "randint": ((), True),
    "calls": (("start", "indexes"), True),
    "fill": (("until", "with"), True),
    "random_base64": ((), True),
    "random_cuts": (("count",), True),
    "random_bursts": (("min", "max"), True),
    "call": (("arguments", "name"), False),
    "json": ((), False),
    "repeat": (("times", "length"), False),
    "take": (("first",), False),
    "cut": (("at",), False),
}
