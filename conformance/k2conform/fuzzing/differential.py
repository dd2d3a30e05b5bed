"""The differential run shared by the fuzz targets and ``k2conform minimize``: one input through
the reference (the oracle) and every adapter under test, in each delivery mode.

It keeps the harness's isolation rules: an adapter is driven through
:func:`k2conform.adapter.harness.execute`, so an exception inside a parser is a ``crash`` result
(a finding) and a hang past the deadline a ``timeout``; anything that is k2conform's own
fault (an ``adapter-error``, the reference parser failing, the reference's stream parse
differing from its one-shot parse, a bug in the comparison) raises :class:`HarnessBug`
or propagates, so the fuzzer stops loudly with a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from k2conform import formats
from k2conform.delivery import modes
from k2conform.case.corpus import CompletionCase, Expectation, load_case
from k2conform.fuzzing.signature import KINDS, classify, components, signature, slug
from k2conform.fuzzing.workers import claims_dir, table_path
from k2conform.judge.compare import same_reply
from k2conform.model import Delta, Request, Result, StreamKind, stream_violations

#: Delivery modes the fuzzers accept: the in-process ones; ``stream-recorded`` replays the
#: pieces the fuzz input's cut list makes (as a case replays its recorded deltas).  Not
#: ``stream-coalesced``: its token groups are drawn from a seed of the case's id, which a
#: finding's case file would get only once written (a case records text deltas, never ids), so
#: its cell could not show what the fuzzer saw.
FUZZ_MODES: tuple[str, ...] = tuple(
    m
    for m in modes.MODES
    if m not in modes.SERVER_MODES
    and not (m in modes.SEEDED_MODES and m in modes.TOKEN_ALIGNED_MODES)
)
DEFAULT_FUZZ_MODES = ("whole", "stream-token")
#: The modes that replay the fuzz input's own cut list (the others ignore it).
CUT_MODES = ("stream-recorded",)
DEFAULT_DEADLINE = 10.0


def refuse_other_format(adapter: Any, format: str = formats.DEFAULT) -> None:
    """A usage error for an adapter named for fuzzing that does not parse ``format``, the
    format the fuzzers mutate (its reference adapter is the oracle)."""
    from k2conform.errors import UsageError

    if format not in adapter.formats:
        raise UsageError(
            f"adapter {adapter.name} parses {', '.join(adapter.formats)} output; this run "
            f"fuzzes {format} output (--format)"
        )


def run_label(target: str, format: str) -> str:
    """A run's name in its findings (tables, case classes): the target's, with the format
    where it is not the default (``differential-k3``), so two formats' findings never meet."""
    return target if format == formats.DEFAULT else f"{target}-{format}"


class HarnessBug(AssertionError):
    """A bug in k2conform itself (glue, reference, comparison): never a parser finding."""


@dataclass
class Observation:
    """One input in one delivery mode through the oracle and every adapter under test."""

    mode: str
    expected: Result
    signature: str
    kinds: dict[str, tuple[str, ...]]
    results: dict[str, Result]  # per adapter: the result of the first disagreeing variant
    deltas: tuple[str, ...] | None  # the variant's pieces, for text-level modes
    variant: str = ""
    #: Offsets of the markers delivered as ordinary token pieces (``spelled_markers``).
    spelled: tuple[int, ...] = ()
    #: The Kimi format of the input (its finding's case carries it).
    format: str = formats.DEFAULT

    @property
    def axis(self) -> str:
        """The mode as findings are keyed: a delivery that spells markers is an axis of its own
        (``stream-token+spelled``), so what it shows is not hidden by the same kind seen in
        the plain delivery."""
        return axis(self.mode, bool(self.spelled))


#: What :attr:`Observation.axis` adds to the mode of a delivery with spelled markers.
SPELLED_AXIS = "+spelled"


def axis(mode: str, spelled: bool) -> str:
    return mode + SPELLED_AXIS if spelled else mode


def axis_mode(label: str) -> str:
    """The delivery mode of an :attr:`Observation.axis` (a findings table key's first part)."""
    return label.removesuffix(SPELLED_AXIS)


class _SpanCache:
    """The tokenizer with its last few texts remembered: every delivery mode of one input
    tokenises the same text, and the stand-in tokenizer costs more than a small parse."""

    def __init__(self, tokenizer: Any, size: int = 4) -> None:
        self.tokenize_spans = functools.lru_cache(maxsize=size)(tokenizer.tokenize_spans)


@dataclass
class Differential:
    """Adapters loaded once; ``observe`` runs one input through them.  ``format``: the Kimi
    format of the inputs; its reference adapter is the oracle, and an adapter of another
    format is none under test (named: a usage error)."""

    adapter_names: Sequence[str] | None = None
    deadline: float = DEFAULT_DEADLINE
    tokenizer: Any = None
    skipped: dict[str, str] = field(default_factory=dict)
    format: str = formats.DEFAULT

    def __post_init__(self) -> None:
        from k2conform.adapter.registry import create_adapter, default_adapter_names, load
        from k2conform.delivery.tokenizer import load_tokenizer

        if self.tokenizer is None:
            self.tokenizer = load_tokenizer()
        self._spans = _SpanCache(self.tokenizer)
        self.leaks = formats.FORMATS[self.format].leak_markers
        oracle = formats.FORMATS[self.format].reference
        self.reference = create_adapter(oracle)
        named = bool(self.adapter_names)
        names = list(self.adapter_names) if named else default_adapter_names()
        self.adapters = []
        for name in names:
            if name == oracle:
                continue
            adapter = create_adapter(name)
            if self.format not in adapter.formats:
                if named:
                    refuse_other_format(adapter, self.format)
                continue
            availability = load(adapter)
            if availability.status == "unavailable":
                self.skipped[name] = availability.reason
                continue
            if availability.status != "ok":
                raise HarnessBug(
                    f"adapter {name} cannot load ({availability.status}): {availability.reason}"
                )
            self.adapters.append(adapter)
        self.names = [a.name for a in self.adapters]

    # -- running ---------------------------------------------------------------------------

    def deliveries(
        self,
        request: Request,
        text: str,
        mode: str,
        cuts: Sequence[int] | None = None,
        recorded: Sequence[str] | None = None,
        spelled: Sequence[int] = (),
    ) -> list[modes.Delivery]:
        """The deliveries the matrix makes of the same case: the request's first declared tool
        for ``stream-after-cutoff``'s prelude and ``stream-interleaved``'s partner; ``spelled``
        markers go out as ordinary token pieces where the mode sends token ids
        (:func:`delivered_spelling`)."""
        if mode == "stream-recorded" and recorded is None:
            recorded = [d.text for d in modes.cut(text, cuts or ())]
        return modes.deliveries(
            text,
            mode,
            self._spans,
            seed=modes.case_seed(modes.DEFAULT_SEED, "fuzz"),
            recorded=recorded,
            tool=modes.cutoff_tool(request.tool_names),
            spelled=delivered_spelling(text, mode, spelled),
        )

    def run(self, adapter: Any, request: Request, delivery: modes.Delivery) -> Result:
        """The harness's ``execute`` under a deadline; glue errors are k2conform's bugs."""
        from k2conform.adapter.harness import execute
        from k2conform.run.cell import DeadlinePassed, deadline

        try:
            with deadline(self.deadline):
                result = execute(adapter, request, delivery)
        except DeadlinePassed:
            result = Result.failed("timeout", f"no result within {self.deadline:g} s")
        if result.outcome not in ("ok", "crash", "timeout"):
            raise HarnessBug(f"{adapter.name} {delivery.label}: {result.outcome}: {result.error}")
        return result

    def oracle(self, request: Request, text: str) -> Result:
        result = self.run(self.reference, request, modes.Delivery("whole", (Delta(text),)))
        if result.outcome != "ok":
            raise HarnessBug(
                f"the reference parser failed: {result.outcome}: {result.error}\ninput: {text!r}"
            )
        return result

    def observe(
        self,
        request: Request,
        text: str,
        mode: str,
        cuts: Sequence[int] | None = None,
        recorded: Sequence[str] | None = None,
        expected: Result | None = None,
        check_reference_stream: bool = True,
        spelled: Sequence[int] = (),
    ) -> Observation:
        """Every adapter's disagreement with ``expected`` (default: the reference's one-shot
        parse).

        ``spelled`` markers (where the mode sends token ids): what the spelling changed, the
        kinds of an adapter's result against its own result for the same delivery unspelled
        (run only when the spelled one disagrees with ``expected``), so a disagreement the
        text alone causes is the unspelled input's finding, never the spelled axis's.

        ``check_reference_stream``: when an adapter disagrees, the reference's own parse of
        the same deliveries must equal its one-shot parse (else the finding would be
        k2conform's: :class:`HarnessBug`); see :meth:`verify_reference_stream`."""
        if expected is None:
            expected = self.oracle(request, text)
        spelling = delivered_spelling(text, mode, spelled)
        variants = self.deliveries(request, text, mode, cuts, recorded, spelling)
        plain = self.deliveries(request, text, mode, cuts, recorded) if spelling else variants
        output = modes.engine_output(text)  # what the adapters are handed (twice: duplicates)
        kinds: dict[str, tuple[str, ...]] = {}
        results: dict[str, Result] = {}
        chosen: modes.Delivery | None = None
        for adapter in self.adapters:
            found: list[str] = []
            for variant, unspelled in zip(variants, plain):
                result = self.run(adapter, request, variant)
                got = classify(expected, result, output, self.leaks)
                if got and spelling:
                    got = self._spelling_changed(
                        adapter, request, unspelled, expected, result, output
                    )
                if got and not found:
                    results[adapter.name] = result
                    chosen = chosen or variant
                elif adapter.name not in results:
                    results[adapter.name] = result
                found.extend(k for k in got if k not in found)
            kinds[adapter.name] = tuple(k for k in KINDS if k in found)
        sig = signature(kinds, self.names)
        if sig and check_reference_stream and mode != "whole":
            self.verify_reference_stream(request, text, variants, expected)
        chosen = chosen or variants[0]
        deltas = tuple(d.text for d in chosen.deltas) if mode in modes.TEXT_LEVEL_MODES else None
        return Observation(
            mode, expected, sig, kinds, results, deltas, chosen.label, spelling, self.format
        )

    def _spelling_changed(
        self,
        adapter: Any,
        request: Request,
        unspelled: modes.Delivery,
        expected: Result,
        spelled: Result,
        output: str,
    ) -> tuple[str, ...]:
        """The kinds of ``spelled`` against the adapter's result for ``unspelled``: none when
        the spelling changed nothing; against ``expected`` when the unspelled parse failed
        and the spelled one did not fail the same way (``output``: what the adapters are
        handed, for duplicate emission)."""
        plain = self.run(adapter, request, unspelled)
        if plain.outcome != "ok":
            if spelled.outcome == plain.outcome:
                return ()
            return classify(expected, spelled, output, self.leaks)
        kinds = classify(plain, spelled, output, self.leaks)
        unspelled = classify(expected, plain, output, self.leaks)
        if "broken-stream" in unspelled:  # the stream broke unspelled too
            kinds = tuple(k for k in kinds if k != "broken-stream")
        return kinds

    def verify_reference_stream(
        self, request: Request, text: str, variants: Sequence[modes.Delivery], expected: Result
    ) -> None:
        """The reference's parse of each delivery equals its one-shot parse, or a HarnessBug
        (what :data:`_ORACLE_MAY_SHOW` names is not a violation of its own).  The
        differential target runs it before it saves a finding and on a sample of inputs
        (:func:`k2conform.fuzzing.targets.differential_target`): on every input it took 8 % of
        an execution, and the reference's streaming is the reference target's to fuzz
        (every input) and the test suite's to check (every split point of every case)."""
        for variant in variants:
            streamed = self.run(self.reference, request, variant)
            broken = [v for v in stream_violations(streamed) if v.kind not in _ORACLE_MAY_SHOW]
            if streamed.outcome != "ok" or broken or not same_reply(streamed, expected):
                raise HarnessBug(
                    f"the reference's {variant.label} parse differs from its one-shot parse:"
                    f"\n{streamed.to_json()}\nvs {expected.to_json()}\ninput: {text!r}"
                )


#: What the reference's own stream may show without being wrong: marker bytes it keeps in
#: content (docs/policies.md, Structure), and arguments held back (the K3 reference sends a
#: typed value only whole, as it decodes it: a 4,400-digit number is one delta).
_ORACLE_MAY_SHOW = frozenset({StreamKind.MARKER_IN_CONTENT, StreamKind.HELD_BACK})


def delivered_spelling(text: str, mode: str, spelled: Sequence[int]) -> tuple[int, ...]:
    """The spelled markers a delivery of ``text`` in ``mode`` carries: none in a text-level
    mode (no token ids), none past the end of turn (never delivered)."""
    if mode in modes.TEXT_LEVEL_MODES:
        return ()
    return tuple(at for at in spelled if at < len(modes.engine_output(text)))


# -- case files ------------------------------------------------------------------------------


def _compact(result: Result) -> str:
    data = {k: v for k, v in result.to_json().items() if k != "meta" and v not in (None, [])}
    if data.get("outcome") == "ok":
        del data["outcome"]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def finding_case(
    request: Request,
    text: str,
    observation: Observation,
    target: str,
    prefix: str = "fuzz",
    minimised: bool = False,
    focus: str | None = None,
    cells: Mapping[str, Any] | None = None,
) -> CompletionCase:
    """A case file in the corpus format recording a disagreement.

    The expectation is the oracle's result; the prefix is the verdict rule's of the
    observation's format (:attr:`k2conform.formats.Format.verdict`), which the case carries;
    description and source record the signature, the delivery and every adapter's observed
    result; ``generator`` records what ``k2conform minimize`` needs to reproduce it, and
    ``cells`` (adapter → the matrix's :class:`~k2conform.model.Cell`, when ``minimize`` held
    them) the matrix's judgement.
    """
    focus = focus or observation.signature
    policies = list(observation.expected.meta.get("policies") or ())
    spelled = observation.spelled
    rule = formats.FORMATS[observation.format].verdict
    verdict = rule(request, text, bool(spelled))[0] if target != "roundtrip" else "y"
    digest = hashlib.sha256(
        json.dumps(
            [text, request.to_json(), observation.deltas, observation.mode]
            + ([list(spelled)] if spelled else []),
            ensure_ascii=False,
        ).encode()
    ).hexdigest()[:8]
    case_id = f"{verdict}_{prefix}_{slug(focus, 48)}_{digest}"
    mode = "stream-recorded" if observation.deltas is not None else observation.mode
    observed = "; ".join(
        f"{name} -> {_compact(result)}"
        for name, result in observation.results.items()
        if observation.kinds.get(name)
    )
    description = (
        f"{'minimised ' if minimised else ''}{target} fuzz finding: {focus} "
        f"in {observation.mode} (matrix mode {mode})"
    )
    source = (
        f"k2conform fuzz {target}{' + k2conform minimize' if minimised else ''}; signature "
        f"{focus} (whole input: {observation.signature}); kinds: "
        f"{'; '.join(f'{a} {chr(43).join(k)}' for a, k in observation.kinds.items() if k)}; "
        f"delivery {observation.mode}"
        f"{', markers spelled from ordinary tokens at ' + str(list(spelled)) if spelled else ''}"
        f"{' [' + observation.variant + ']' if observation.variant else ''}; observed: {observed}; "
        f"expected ({'rendered calls' if target == 'roundtrip' else 'reference'}): "
        f"{_compact(observation.expected)}; reference policies: {', '.join(policies) or '-'}"
    )
    tags = ["FUZZ." + target] + [
        f"FUZZ.{kind}" for kind in dict.fromkeys(k for ks in observation.kinds.values() for k in ks)
    ]
    expected = Expectation(
        observation.expected.content,
        observation.expected.reasoning,
        observation.expected.tool_calls,
    )
    generator = {
        "class": f"FUZZ.{target}",
        "seed": 0,
        "delivery": observation.mode,
        "signature": focus,
        "adapters": sorted(observation.kinds),
    }
    if cells:
        generator["cells"] = {
            name: {"outcome": cell.outcome.value, "fields": list(cell.fields)}
            for name, cell in sorted(cells.items())
        }
    deltas = observation.deltas
    if deltas is not None and "".join(deltas) != text:
        # the delivery stopped at <|im_end|> (modes.engine_output): the case's deltas must still
        # add up to its model_output, so the rest is one more piece, which a replay drops again
        deltas = (*deltas, text[len("".join(deltas)) :])
    return CompletionCase(
        case_id,
        description,
        tuple(tags),
        source,
        request,
        text,
        deltas,
        expected,
        generator,
        format=observation.format,
        spelled_markers=spelled,
    )


def cell_key(cell: Mapping[str, Any]) -> str:
    """``vllm:differs:content+reasoning``: a finding keyed by the matrix's judgement."""
    return f"{cell['adapter']}:{cell['outcome']}:{'+'.join(cell['fields'])}"


def matrix_mode(case: CompletionCase, mode: str) -> str:
    """The mode a finding's case file is judged in: its recorded deltas when it has them (a
    text-level finding keeps the chunks that showed it), else the fuzzer's mode."""
    return "stream-recorded" if case.deltas is not None else mode


def judge_finding(case: CompletionCase, adapter: Any, mode: str, deadline: float) -> Any:
    """The finding's case file as a matrix cell of ``adapter`` in its :func:`matrix_mode`."""
    from k2conform.run.cell import CellSettings, run_cell

    return run_cell(adapter, case, matrix_mode(case, mode), CellSettings(deadline=deadline))


def write_case_file(case: CompletionCase, directory: Path | str) -> Path:
    from k2conform.case.corpus import write_case

    return write_case(case, directory)


# -- findings --------------------------------------------------------------------------------


@dataclass
class FindingStore:
    """Distinct signatures: a new one is saved as a case file, a known one only counted.

    Signatures already saved in ``directory`` (by an earlier run) count as known.  The
    table is written to ``directory/signatures-<target>.json`` as it changes, since
    libFuzzer ends the process without running Python's exit handlers.  ``repeats`` counts
    the executions whose input the parsers had already run
    (:class:`~k2conform.fuzzing.mutator.SeenInputs`), so the table tells executions that
    explored something apart from those that did not.  As worker ``K`` of
    ``k2conform fuzz --workers N`` (:mod:`k2conform.fuzzing.workers`) the table is
    ``signatures-<target>.worker-K.json``, and a new signature is claimed first (a file
    created only if absent, in the run's claims directory): the worker that loses the claim
    only counts it, so the workers save each signature once between them.

    With ``judge`` (``--distinct cells``: the rediscovery bench) a component is keyed by the
    matrix's judgement of its case instead (``MODE adapter:outcome:fields``, from
    ``judge(case, adapter, mode)``, a :class:`~k2conform.model.Cell`): two inputs the fuzzer
    gives the same kind but the matrix tells apart are two findings, and one the matrix files
    as no finding is none.  Each row records the CPU seconds of fuzzing (after the set-up)
    at its first sighting; ``cpu_budget`` ends the process once fuzzing has used that many.
    """

    directory: Path
    target: str
    worker: int | None = None
    judge: Callable[[CompletionCase, str, str], Any] | None = None
    cpu_budget: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    first_cpu: dict[str, float] = field(default_factory=dict)
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    components: set[str] = field(default_factory=set)  # with ``judge``: fuzz keys seen
    new: list[str] = field(default_factory=list)
    executions: int = 0
    repeats: int | None = None  # None until an execution says whether it repeated one
    started: float = field(default_factory=time.monotonic)
    cpu_started: float = field(default_factory=time.process_time)
    _written: float = 0.0

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                try:
                    case = load_case(path)
                except Exception:  # noqa: BLE001 - a table or a foreign file, not a finding
                    continue
                generator = getattr(case, "generator", None) or {}
                if generator.get("class") == f"FUZZ.{self.target}" and "signature" in generator:
                    mode = axis(generator["delivery"], bool(getattr(case, "spelled_markers", ())))
                    key = self.key(mode, generator["signature"])
                    self.counts.setdefault(key, 0)
                    self.files.setdefault(key, str(path))

    @staticmethod
    def key(mode: str, sig: str) -> str:
        return f"{mode} {sig}"

    def is_new(self, observation: Observation) -> bool:
        """Whether recording the observation would save a case file (a new component; with
        ``judge``, a fuzz component not seen yet, without the cost of judging it)."""
        keys = [self.key(observation.axis, c) for c in components(observation.signature)]
        if self.judge is not None:
            return any(key not in self.components for key in keys)
        return any(self.files.get(key) is None for key in keys)

    def record(self, request: Request, text: str, observation: Observation) -> list[str]:
        """Count each component of the signature; save the input once per new component."""
        fresh = []
        for component in components(observation.signature):
            case = None
            key = self.key(observation.axis, component)
            if self.judge is not None:
                self.components.add(key)
                case = finding_case(request, text, observation, self.target, focus=component)
                cell = self.judge(case, component.partition(":")[0], observation.mode)
                if not cell.outcome.finding:
                    continue
                what = {"adapter": cell.adapter, "outcome": cell.outcome.value}
                what["fields"] = list(cell.fields)
                key = self.key(observation.axis, cell_key(what))
                self.cells.setdefault(key, what)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.first_cpu.setdefault(key, round(self.cpu_seconds(), 2))
            if self.files.get(key) is None and not self._claim(key):
                if case is None:
                    case = finding_case(request, text, observation, self.target, focus=component)
                self.files[key] = str(write_case_file(case, self.directory))
                self.new.append(key)
                fresh.append(key)
                self._claimed(key)
                print(f"[k2conform fuzz] saved {key} -> {self.files[key]}", flush=True)
        self.save(force=bool(fresh))
        return fresh

    def _claim_file(self, key: str) -> Path:
        name = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return claims_dir(self.directory, self.target) / name

    def _claim(self, key: str) -> bool:
        """False when this store may save ``key``'s case file; True (and the key known, with
        the other worker's file once it has written it) when another worker claimed it."""
        if self.worker is None:
            return False
        path = self._claim_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            self.files[key] = path.read_text(encoding="utf-8") or ""
            return True
        return False

    def _claimed(self, key: str) -> None:
        if self.worker is not None:
            self._claim_file(key).write_text(self.files[key] or "", encoding="utf-8")

    def tick(self, repeated: bool | None = None) -> None:
        """Count one execution, and whether its input had run before where that is known."""
        self.executions += 1
        if repeated is not None:
            self.repeats = (self.repeats or 0) + repeated
        if self.executions % 200 == 0:
            self.save()
        if self.cpu_budget is not None and self.cpu_seconds() >= self.cpu_budget:
            self.save(force=True)
            print(f"[k2conform fuzz] CPU budget of {self.cpu_budget:g} s used", flush=True)
            os._exit(0)  # libFuzzer has no CPU-time limit; its exit() would wait for nothing

    def cpu_seconds(self) -> float:
        """CPU seconds this process has fuzzed since the store was made (after the set-up)."""
        return time.process_time() - self.cpu_started

    def save(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < 2.0:
            return
        self._written = now
        self.directory.mkdir(parents=True, exist_ok=True)
        data = {
            "target": self.target,
            **({} if self.worker is None else {"worker": self.worker}),
            "executions": self.executions,
            **({} if self.repeats is None else {"repeats": self.repeats}),
            "seconds": round(now - self.started, 1),
            "cpu_seconds": round(self.cpu_seconds(), 2),
            **({} if self.judge is None else {"distinct": "cells"}),
            "signatures": [
                {
                    "key": k,
                    "count": c,
                    "file": self.files.get(k),
                    "new": k in self.new,
                    "first_cpu": self.first_cpu.get(k),
                    **({"cell": self.cells[k]} if k in self.cells else {}),
                }
                for k, c in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
        }
        path = table_path(self.directory, self.target, self.worker)
        path.write_text(
            json.dumps(data, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8",
            errors="backslashreplace",
        )  # a lone surrogate stays its JSON escape


def format_table(data: Mapping[str, Any]) -> str:
    """The signature table of a ``signatures-<target>.json``."""
    rows = data.get("signatures") or []
    lines = [
        f"{data.get('target')}: {data.get('executions')} executions"
        f"{' by ' + str(data['workers']) + ' workers' if data.get('workers') else ''}"
        f"{_repeats(data)} in "
        f"{data.get('seconds')} s, "
        f"{len(rows)} distinct signatures ({sum(1 for r in rows if r['new'])} first saved "
        "this run; new to the project or not: below)"
    ]
    if rows:
        lines.append(f"{'count':>7}  {'saved':5}  signature (delivery adapter:kinds|...)")
        for row in rows:
            lines.append(f"{row['count']:>7}  {'yes' if row['new'] else '':5}  {row['key']}")
    return "\n".join(lines)


def _repeats(data: Mapping[str, Any]) -> str:
    repeats, executions = data.get("repeats"), data.get("executions")
    if repeats is None or not executions:
        return ""
    return f" ({repeats} of them, {100 * repeats / executions:.0f} %, repeated an earlier input)"
