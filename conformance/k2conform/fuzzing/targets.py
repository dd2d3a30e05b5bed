"""The three atheris targets: ``reference``, ``differential`` and ``roundtrip``.

Run one as ``python fuzz/fuzz_NAME.py [options] [libFuzzer flags] [corpus dirs]`` or
``python -m k2conform.fuzzing.targets NAME ...``; ``k2conform fuzz NAME`` wraps it.
Options (before the libFuzzer flags): ``--adapter A`` (repeatable; default every available
adapter but the reference), ``--delivery M`` (repeatable; default ``whole`` and
``stream-token``), ``--findings DIR`` (default ``fuzz/findings``), ``--deadline S``
(seconds per parse before it is a timeout finding), ``--instrument parsers|reference``,
``--worker K`` (worker K of ``k2conform fuzz --workers N``: its own findings table),
``--format F`` (the differential target's Kimi format: ``k2``, the default, or ``k3``; its
reference adapter is the oracle and its adapters the ones under test).
The environment variables ``K2FUZZ_ADAPTERS``, ``K2FUZZ_DELIVERY`` (comma-separated),
``K2FUZZ_FINDINGS``, ``K2FUZZ_INSTRUMENT`` and ``K2FUZZ_FORMAT`` stand in for them where a
fuzzing service runs the target with libFuzzer flags only (docs/fuzzing.md).

Only what libFuzzer should steer by is instrumented (:mod:`k2conform.fuzzing.instrument`):
the reference parser and, by default, the files every adapter under test declares as its
parser's (vLLM's and SGLang's Kimi modules and the engine code they run through), less the
set-up functions whose edges never change (``SET_UP_ONLY``); ``--instrument reference`` leaves
the parsers out.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

from k2conform import formats
from k2conform.fuzzing.instrument import INSTRUMENT_CHOICES, KIMI

TARGETS = ("reference", "differential", "roundtrip")
#: The targets whose input is the envelope (:mod:`k2conform.fuzzing.envelope`), so the seed
#: corpus and the marker dictionary apply; the roundtrip target reads structured bytes.
ENVELOPE_TARGETS = ("reference", "differential")
#: libFuzzer's ``-max_len`` per target (``k2conform fuzz``, ``bench``, the services' .options).
#: 2 KB holds several calls; a 4 KB limit halved the reference target's speed and, in a
#: minute from the seed corpus, reached no more coverage (cov 284 either way).
MAX_LEN = {"reference": 2048, "differential": 2048, "roundtrip": 2048}
#: The executables a fuzzing service builds (``fuzz/fuzz_NAME.py``) -> (target, format): each
#: target over K2 output, and the differential target over K3 output.
SERVICE_TARGETS: dict[str, tuple[str, str]] = {
    **{target: (target, formats.DEFAULT) for target in TARGETS},
    "differential_k3": ("differential", "k3"),
}
MAX_TEXT = 8192
#: ``--distinct``: what makes two findings two: the fuzz signature's component (default), or
#: the matrix's judgement of the finding's case (the rediscovery bench: slower, finer).
DISTINCT = ("signature", "cells")


def libfuzzer_timeout(deadline: float) -> int:
    """libFuzzer's ``-timeout``: well past the per-parse deadline, which files a hang as a
    ``timeout`` finding; libFuzzer's own only catches k2conform stuck outside a parse."""
    return int(max(60, deadline * 8))


def default_fuzz_dir() -> Path:
    """``fuzz/`` of this checkout, else ``./k2conform-fuzz`` (an installed package's copy is
    read-only)."""
    from k2conform.resources import checkout_root

    root = checkout_root()
    return root / "fuzz" if root is not None else Path.cwd() / "k2conform-fuzz"


def own_options(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split our options from libFuzzer's flags and corpus directories."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--adapter", action="append")
    parser.add_argument("--delivery", action="append")
    parser.add_argument("--findings", type=Path)
    parser.add_argument("--deadline", type=float, default=10.0)
    parser.add_argument("--instrument", choices=INSTRUMENT_CHOICES)
    parser.add_argument("--worker", type=int)
    parser.add_argument("--distinct", choices=DISTINCT, default=DISTINCT[0])
    parser.add_argument("--cpu-budget", type=float)
    parser.add_argument("--format")
    options, rest = parser.parse_known_args(list(argv[1:]))
    env = os.environ
    options.format = options.format or env.get("K2FUZZ_FORMAT") or formats.DEFAULT
    if options.format not in formats.FORMATS:
        raise SystemExit(f"--format {options.format!r}: one of {', '.join(formats.FORMATS)}")
    options.instrument = options.instrument or env.get("K2FUZZ_INSTRUMENT") or INSTRUMENT_CHOICES[0]
    if options.instrument not in INSTRUMENT_CHOICES:
        raise SystemExit(
            f"K2FUZZ_INSTRUMENT={options.instrument!r}: one of {', '.join(INSTRUMENT_CHOICES)}"
        )
    options.adapter = options.adapter or (
        env["K2FUZZ_ADAPTERS"].split(",") if env.get("K2FUZZ_ADAPTERS") else None
    )
    options.delivery = options.delivery or (
        env["K2FUZZ_DELIVERY"].split(",") if env.get("K2FUZZ_DELIVERY") else None
    )
    options.findings = options.findings or Path(
        env.get("K2FUZZ_FINDINGS") or default_fuzz_dir() / "findings"
    )
    return options, [argv[0], *rest]


def silence() -> None:
    """Parsers log freely (a warning per unknown id); fuzzing output must stay readable."""
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# -- reference --------------------------------------------------------------------------------


def reference_target(seen: Any = None) -> Callable[[bytes], None]:
    """The reference parser's own properties on every input; each input run goes into
    ``seen`` (:class:`~k2conform.fuzzing.mutator.SeenInputs`), which the mutators steer away
    from."""
    from k2conform.delivery.modes import cut
    from k2conform.fuzzing.envelope import decode
    from k2conform.markers import LEAK_MARKERS
    from k2conform.model import Result, StreamKind, ToolCall
    from k2conform.reference.parser import ReferenceParser, parse
    from k2conform.reference.policies import POLICIES
    from k2conform.judge.compare import same_reply
    from k2conform.judge.stream import assemble

    known_policies = frozenset(POLICIES)

    def check_valid(result: Result) -> None:
        assert isinstance(result, Result) and result.outcome == "ok" and result.error is None, (
            result
        )
        for text in (result.content, result.reasoning):
            assert text is None or (isinstance(text, str) and text != ""), result
        for call in result.tool_calls:
            assert isinstance(call, ToolCall), call
            assert isinstance(call.name, str) and isinstance(call.arguments, str), call
            assert call.id is None or isinstance(call.id, str), call
        assert known_policies.issuperset(result.meta["policies"]), result.meta
        assert Result.from_json(json.loads(json.dumps(result.to_json()))) == result

    def test_one_input(data: bytes) -> None:
        fuzz = decode(data)
        if seen is not None:
            seen.add(fuzz)
        if len(fuzz.text) > MAX_TEXT:
            return
        request = fuzz.request()
        whole = parse(fuzz.text, request)
        check_valid(whole)
        deltas = cut(fuzz.text, fuzz.split_points())
        parser = ReferenceParser(request)
        events = [parser.feed(d.text) for d in deltas] + [parser.finish()]
        streamed = parser.result()
        assert same_reply(streamed, whole), (fuzz, streamed, whole)
        assembled = assemble(events, leaks=LEAK_MARKERS)
        # Marker bytes in content are a stream violation only where the one-shot content has
        # none (the reference keeps a stray section end in text as content: docs/policies.md,
        # Structure).
        leaks = any(m in (whole.content or "") for m in LEAK_MARKERS)
        violations = [
            v
            for v in assembled.violations
            if not (leaks and v.kind is StreamKind.MARKER_IN_CONTENT)
        ]
        assert not violations, (fuzz, violations)
        assert same_reply(assembled.result, whole), (fuzz, assembled.result, whole)

    return test_one_input


# -- differential -----------------------------------------------------------------------------


#: One input in this many (by its hash) has the reference's own stream checked even when no
#: adapter disagrees (:meth:`k2conform.fuzzing.differential.Differential.verify_reference_stream`).
REFERENCE_STREAM_SAMPLE = 16


def differential_target(
    engine: Any, modes: Sequence[str], store: Any, seen: Any
) -> Callable[[bytes], None]:
    """Every delivery mode through the oracle and the adapters; the reference's own stream is
    checked before a new finding is saved and on one input in :data:`REFERENCE_STREAM_SAMPLE`
    (a known signature is only counted).  Every input run goes into ``seen``
    (:class:`~k2conform.fuzzing.mutator.SeenInputs`), which the mutators steer away from."""
    from k2conform.fuzzing.envelope import decode

    def test_one_input(data: bytes) -> None:
        fuzz = decode(data, engine.format)
        repeated = seen.add(fuzz)
        if len(fuzz.text) > MAX_TEXT:
            return
        request = fuzz.request()
        expected = engine.oracle(request, fuzz.text)
        cuts = fuzz.split_points()
        spelled = fuzz.spelled_markers()
        sampled = zlib.crc32(data) % REFERENCE_STREAM_SAMPLE == 0
        for mode in modes:
            observation = engine.observe(
                request,
                fuzz.text,
                mode,
                cuts,
                expected=expected,
                check_reference_stream=False,
                spelled=spelled,
            )
            new = bool(observation.signature) and store.is_new(observation)
            if mode != "whole" and (new or sampled):
                variants = engine.deliveries(request, fuzz.text, mode, cuts, spelled=spelled)
                engine.verify_reference_stream(request, fuzz.text, variants, expected)
            if observation.signature:
                store.record(request, fuzz.text, observation)
        store.tick(repeated)

    return test_one_input


# -- roundtrip --------------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NAME_TAIL = _LETTERS + "_0123456789"
_NON_ASCII = "éüßçñøåжщкπλ天气查询ツール"
#: Marker texts a string argument may quote.  Not ``<|im_end|>``: generation stops at the
#: end-of-turn token, so no model output carries it inside arguments (every parser is handed
#: the output up to it).
_MARKER_TEXTS = (
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_calls_section_begin|>",
    "</think>",
)


def _word(fdp: Any, alphabet: str, low: int, high: int) -> str:
    return "".join(
        alphabet[fdp.ConsumeIntInRange(0, len(alphabet) - 1)]
        for _ in range(fdp.ConsumeIntInRange(low, high))
    )


def fuzz_name(fdp: Any) -> str:
    """A function name: plain, dotted, hyphenated or non-ASCII (one to three segments)."""
    style = fdp.ConsumeIntInRange(0, 3)
    alphabet = _NAME_TAIL + ("-" if style in (2, 3) else "") + (_NON_ASCII if style == 3 else "")
    segments = (
        fdp.ConsumeIntInRange(2, 3) if style == 1 or (style == 3 and fdp.ConsumeBool()) else 1
    )
    return ".".join(
        _word(fdp, _LETTERS + "_", 1, 1) + _word(fdp, alphabet, 0, 10) for _ in range(segments)
    )


def fuzz_string(fdp: Any) -> str:
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 16))
    if fdp.ConsumeIntInRange(0, 4) == 0:
        text += _MARKER_TEXTS[fdp.ConsumeIntInRange(0, len(_MARKER_TEXTS) - 1)] + text[:3]
    return text


def fuzz_value(fdp: Any, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 7 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeIntInRange(-(10**15), 10**15)
    if kind == 3:
        return fdp.ConsumeRegularFloat()
    if kind in (4, 5):
        return fuzz_string(fdp)
    if kind == 6:
        return [fuzz_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return fuzz_object(fdp, depth + 1)


def fuzz_object(fdp: Any, depth: int = 0) -> dict[str, Any]:
    return {
        fuzz_string(fdp) or "k": fuzz_value(fdp, depth) for _ in range(fdp.ConsumeIntInRange(0, 4))
    }


def roundtrip_input(data: bytes) -> tuple[Any, str, Any]:
    """(request, model output, expected result) chosen by the fuzz input."""
    import atheris

    from k2conform.model import Request, Result, ToolCall
    from k2conform.reference.render import render_tool_calls

    fdp = atheris.FuzzedDataProvider(data)
    names = list(dict.fromkeys(fuzz_name(fdp) for _ in range(fdp.ConsumeIntInRange(1, 4))))
    calls, rendered = [], []
    for index in range(fdp.ConsumeIntInRange(0, 8)):
        name = names[fdp.ConsumeIntInRange(0, len(names) - 1)]
        arguments = json.dumps(fuzz_object(fdp), ensure_ascii=fdp.ConsumeBool())
        call_id = f"functions.{name}:{index}"
        calls.append(ToolCall(name=name, arguments=arguments, id=call_id))
        rendered.append({"id": call_id, "function": {"name": name, "arguments": arguments}})
    content = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 24)).replace("<", "") or None
    thinking = fdp.ConsumeIntInRange(0, 3) == 0
    reasoning = None
    prefix = content or ""
    if thinking:
        reasoning = (
            fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(1, 24)).replace("<", "") or "hmm"
        )
        prefix = reasoning + "</think>" + prefix
    tools = tuple(
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"Tool {n}",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for n in names
    )
    request = Request(tools=tools, thinking=thinking)
    expected = Result(content=content, reasoning=reasoning, tool_calls=tuple(calls))
    return request, prefix + render_tool_calls(rendered), expected


def roundtrip_target(engine: Any, modes: Sequence[str], store: Any) -> Callable[[bytes], None]:
    from k2conform.judge.compare import compare_results

    def test_one_input(data: bytes) -> None:
        request, text, expected = roundtrip_input(data)
        # The reference must recover exactly the rendered calls, ids included: else it is ours.
        reference = engine.oracle(request, text)
        diffs = compare_results(expected, reference)
        assert not diffs, (text, request.to_json(), [d.to_json() for d in diffs])
        for delivery in engine.deliveries(request, text, "stream-char"):
            streamed = engine.run(engine.reference, request, delivery)
            assert streamed.outcome == "ok" and not compare_results(expected, streamed), (
                text,
                streamed,
            )
        for mode in modes:
            observation = engine.observe(
                request, text, mode, None, expected=expected, check_reference_stream=False
            )
            if observation.signature:
                store.record(request, text, observation)
        store.tick()

    return test_one_input


# -- main -------------------------------------------------------------------------------------


def _load_engine(atheris: Any, options: argparse.Namespace) -> Any:
    """The engine with its adapters loaded, then the parsers' declared files instrumented."""
    from k2conform.fuzzing.differential import Differential
    from k2conform.fuzzing.instrument import instrument_adapters

    engine = Differential(options.adapter, deadline=options.deadline, format=options.format)
    for name, reason in engine.skipped.items():
        print(f"[k2conform fuzz] {name} unavailable: {reason}", file=sys.stderr)
    under_test = engine.adapters if options.instrument in ("parsers", KIMI) else []
    instrument_adapters([engine.reference], atheris)
    if under_test:
        instrument_adapters(under_test, atheris, shared=options.instrument != KIMI)
    return engine


def main(name: str, argv: Sequence[str] | None = None) -> None:
    import atheris

    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r} (known: {', '.join(TARGETS)})")
    options, rest = own_options(list(sys.argv if argv is None else argv))
    if name != "differential" and options.format != formats.DEFAULT:
        raise SystemExit(f"--format {options.format}: the {name} target fuzzes K2 output only")
    silence()
    from k2conform.fuzzing.mutator import SeenInputs, mutators

    kwargs: dict[str, Any] = {}
    if name == "reference":
        from k2conform.adapter.registry import create_adapter
        from k2conform.fuzzing.instrument import instrument_adapters

        instrument_adapters([create_adapter("reference")], atheris)
        seen = SeenInputs(reads_tokens=False)
        test_one_input = reference_target(seen)
        kwargs = mutators(seen)
    else:
        from k2conform.delivery.modes import TEXT_LEVEL_MODES
        from k2conform.fuzzing.differential import (
            CUT_MODES,
            DEFAULT_FUZZ_MODES,
            FUZZ_MODES,
            FindingStore,
        )

        modes = tuple(options.delivery or DEFAULT_FUZZ_MODES)
        unknown = [m for m in modes if m not in FUZZ_MODES]
        if unknown:
            raise SystemExit(f"unknown delivery mode(s) {unknown} (known: {', '.join(FUZZ_MODES)})")
        engine = _load_engine(atheris, options)
        judge = None
        if options.distinct == "cells":
            from k2conform.fuzzing.differential import judge_finding

            by_name = {adapter.name: adapter for adapter in engine.adapters}

            def judge(case: Any, adapter: str, mode: str) -> Any:
                return judge_finding(case, by_name[adapter], mode, engine.deadline)

        from k2conform.fuzzing.differential import run_label

        label = run_label(name, options.format)
        store = FindingStore(options.findings, label, options.worker, judge, options.cpu_budget)
        print(
            f"[k2conform fuzz] {label}: adapters {', '.join(engine.names) or '(none)'}; deliveries "
            f"{', '.join(modes)}; findings in {options.findings}",
            file=sys.stderr,
            flush=True,
        )
        if name == "differential":
            seen = SeenInputs(
                reads_cuts=any(mode in CUT_MODES for mode in modes),
                reads_tokens=any(mode not in TEXT_LEVEL_MODES for mode in modes),
            )
            test_one_input = differential_target(engine, modes, store, seen)
            kwargs = mutators(seen, options.format)
        else:
            test_one_input = roundtrip_target(engine, modes, store)
    # What is loaded now stays: a full collection would walk torch's, vLLM's and SGLang's
    # ~630,000 objects (0.4 s) every time the fuzzed parsers' garbage triggers one.
    gc.collect()
    gc.freeze()
    # A young-generation collection every 20,000 allocations, not 700: each one also promotes
    # the execution's live temporaries (parser state, pydantic messages) that the next full
    # collection must walk; the collections took 1.5-2 % of a differential execution.
    gc.set_threshold(20_000, 20, 10)
    # Importing the parsers costs more CPU than minutes of fuzzing: bench subtracts this.
    print(
        f"[k2conform fuzz] {name}: ready after {time.process_time():.2f} CPU seconds",
        file=sys.stderr,
        flush=True,
    )
    atheris.Setup(rest, test_one_input, **kwargs)
    atheris.Fuzz()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(
            f"usage: python -m k2conform.fuzzing.targets {{{','.join(TARGETS)}}} [options] "
            "[libFuzzer flags] [corpus dirs]"
        )
    target_name = sys.argv.pop(1)
    main(target_name)
