"""Fuzzing: the envelope, the marker-aware mutator, the signature classifier, the minimiser,
and every atheris target run briefly in a subprocess (as CI does)."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k2conform import markers
from k2conform.fuzzing import mutator as mu
from k2conform.fuzzing.envelope import (
    DECLARE_TOOLS,
    SAMPLED_CUTS,
    SPELLED,
    THINKING,
    FuzzInput,
    decode,
    tool_names_in,
)
from k2conform.fuzzing.seeds import build_seed_corpus, dictionary_text
from k2conform.fuzzing.signature import classify, components, matches, parse_signature, signature
from k2conform.fuzzing.syntax import K2 as K2_SYNTAX
from k2conform.model import Result, ToolCall
from k2conform.testkit.strategies import completions

from entry_points import K2CONFORM

ROOT = Path(__file__).resolve().parent.parent
SB, SE, TB, AB, TE = markers.TOOL_MARKERS
ONE_CALL = f'Sure.{SB}{TB}functions.get_weather:0{AB}{{"city": "Paris"}}{TE}{SE}'
TWO_CALLS = f'{SB}{TB}functions.a:0{AB}{{"x": 1}}{TE}{TB}functions.b.c:1{AB}{{"y": [2]}}{TE}{SE}'


def _available(name: str) -> bool:
    from k2conform.adapter.registry import create_adapter, load

    return load(create_adapter(name)).status == "ok"


def _markers(text: str) -> list[str]:
    return [m.group() for m in K2_SYNTAX.occurrence.finditer(text)]


def _text_bytes_valid(data: bytes) -> bool:
    body = data[1:].split(b"\xff")[0]
    body.decode("utf-8")  # raises if not UTF-8
    return True


# -- envelope ------------------------------------------------------------------------------------


def test_envelope_round_trips_and_any_bytes_decode():
    fuzz = FuzzInput("héllo " + ONE_CALL, THINKING | DECLARE_TOOLS, (1, 5, 300, 301))
    assert decode(fuzz.encode()) == fuzz
    assert decode(FuzzInput("x", 0, None).encode()) == FuzzInput("x", 0, None)
    rng = random.Random(0)
    for _ in range(500):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        fuzz = decode(data)
        assert isinstance(fuzz.text, str) and all(
            0 < c < len(fuzz.text) for c in fuzz.split_points()
        )
    assert tool_names_in(TWO_CALLS) == ["a", "b.c"]
    assert [t["function"]["name"] for t in FuzzInput(TWO_CALLS, DECLARE_TOOLS).request().tools] == [
        "a",
        "b.c",
    ]
    assert FuzzInput(TWO_CALLS, 0).request().tools == ()


def test_split_points_without_a_cut_list_are_a_few_drawn_from_the_input():
    fuzz = FuzzInput(ONE_CALL * 3)
    assert fuzz.split_points() == FuzzInput(ONE_CALL * 3).split_points()  # a finding replays
    cuts = fuzz.split_points()
    assert len(cuts) == SAMPLED_CUTS and list(cuts) == sorted(set(cuts))
    drawn = {FuzzInput(ONE_CALL + "x" * k).split_points() for k in range(20)}
    assert len(drawn) > 15  # the cuts move with the input, not one fixed pattern
    assert FuzzInput("ab").split_points() == (1,) and FuzzInput("a").split_points() == ()


# -- mutator -------------------------------------------------------------------------------------


def _byte_flips(data: bytes, max_size: int) -> bytes:
    """A stand-in for libFuzzer's mutation: random bytes anywhere, UTF-8 broken on purpose."""
    rng = random.Random(data)
    out = bytearray(data)
    for _ in range(3):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out[:max_size])


@pytest.mark.parametrize("libfuzzer", [None, _byte_flips])
def test_mutator_keeps_producing_valid_utf8_within_max_size(libfuzzer):
    data = FuzzInput(ONE_CALL + "天气", DECLARE_TOOLS).encode()
    for seed in range(3000):
        data = mu.mutate(data, 1024, seed, libfuzzer)
        assert len(data) <= 1024 and _text_bytes_valid(data)
        if seed % 300 == 0:
            data = FuzzInput(TWO_CALLS + "é😀", DECLARE_TOOLS).encode()


def test_fit_shortens_by_whole_characters():
    data = mu.fit(FuzzInput("😀" * 100, 0, tuple(range(1, 100))), 50)
    assert len(data) <= 50 and _text_bytes_valid(data)


def _each(operation, text, check, tries=30):
    for seed in range(tries):
        before = FuzzInput(text, DECLARE_TOOLS)
        after = mu.apply(operation, before, random.Random(seed))
        check(before, after)


def _without_one(text, marker):
    return {
        text[:i] + text[i + len(marker) :] for i in range(len(text)) if text.startswith(marker, i)
    }


def test_insert_adds_one_marker():
    def check(b, a):
        assert any(
            b.text in _without_one(a.text, m) for m in K2_SYNTAX.units + K2_SYNTAX.extra_units
        ), a

    _each("insert", ONE_CALL, check)


def test_drop_removes_one_marker():
    def check(b, a):
        assert len(_markers(a.text)) == len(_markers(b.text)) - 1
        assert len(a.text) < len(b.text)

    _each("drop", ONE_CALL, check)


def test_duplicate_repeats_a_marker_in_place():
    def check(b, a):
        assert len(_markers(a.text)) == len(_markers(b.text)) + 1
        assert any(m + m in a.text for m in K2_SYNTAX.units)

    _each("duplicate", ONE_CALL, check)


def test_reorder_swaps_two_markers():
    def check(b, a):
        assert sorted(_markers(a.text)) == sorted(_markers(b.text)) and _markers(
            a.text
        ) != _markers(b.text)
        assert len(a.text) == len(b.text)

    _each("reorder", ONE_CALL, check)


def test_truncate_leaves_a_marker_prefix():
    def check(b, a):
        assert len(_markers(a.text)) == len(_markers(b.text)) - 1
        assert 0 < len(b.text) - len(a.text) < max(map(len, K2_SYNTAX.units))

    _each("truncate", ONE_CALL, check)


def test_break_puts_text_inside_a_marker():
    def check(b, a):
        assert len(_markers(a.text)) < len(_markers(b.text)) and len(a.text) > len(b.text)

    _each("break", ONE_CALL, check)


def test_index_changes_the_call_index():
    """Only the index between the name's colon and the argument marker changes ("0" may be
    drawn again, so the change itself is checked over many seeds)."""
    head = "Sure." + SB + TB + "functions.get_weather:"

    def check(b, a):
        index, _, rest = a.text[len(head) :].partition(AB)
        assert a.text.startswith(head) and rest == b.text.partition(AB)[2]
        assert re.fullmatch(r"[0-9x -]*", index), index

    _each("index", ONE_CALL, check)
    changed = {mu.apply("index", FuzzInput(ONE_CALL), random.Random(s)).text for s in range(30)}
    assert len(changed) > 3


def test_name_changes_the_function_name():
    names = set()
    for seed in range(40):
        after = mu.apply("name", FuzzInput(ONE_CALL), random.Random(seed))
        (name,) = tool_names_in(after.text) or ["?"]
        names.add(name)
        assert after.text.endswith(AB + '{"city": "Paris"}' + TE + SE)
    assert len(names) > 4 and "search.web" in names


def test_splice_replaces_an_argument_body():
    def check(b, a):
        assert a.text.startswith(b.text.split(AB)[0] + AB) and a.text.endswith(TE + SE)
        assert any(
            f"{AB}{body}{TE}" in a.text
            for body in K2_SYNTAX.argument_pool + ('{"x": 1}', '{"y": [2]}')
        )

    _each("splice", TWO_CALLS, check)


def test_split_cuts_inside_a_marker():
    for seed in range(30):
        after = mu.apply("split", FuzzInput(ONE_CALL, 0, ()), random.Random(seed))
        (cut,) = after.split_points()
        assert any(m.start() < cut < m.end() for m in K2_SYNTAX.occurrence.finditer(ONE_CALL))


def test_cuts_and_flags_operations():
    after = mu.apply("cuts", FuzzInput("abcdef", 0, ()), random.Random(0))
    assert len(after.split_points()) == SAMPLED_CUTS
    assert set(after.split_points()) <= {1, 2, 3, 4, 5}
    every = FuzzInput("x" * 50, 0, tuple(range(1, 50)))
    for seed in range(30):  # drops boundaries or draws a few new ones, never one per character
        cuts = mu.apply("cuts", every, random.Random(seed)).split_points()
        assert set(cuts) <= set(every.cuts) and len(cuts) < len(every.cuts)
    flags = {mu.apply("flags", FuzzInput("x", 0), random.Random(s)).flags for s in range(30)}
    assert flags == {1, 2, 4, SPELLED}


def test_crossover_joins_two_inputs_at_markers():
    one, two = FuzzInput(ONE_CALL).encode(), FuzzInput(TWO_CALLS).encode()
    for seed in range(50):
        data = mu.crossover(one, two, 4096, seed)
        assert _text_bytes_valid(data) and data not in (one, two)  # never a parent again


def test_mutations_look_for_an_input_not_run_yet(monkeypatch):
    """No marker to drop, no call to rename: an operation with nothing to act on gave the
    parent back.  A mutation is now one the target has not run (without ``seen``: one that
    differs from the parent) unless ``ATTEMPTS`` tries gave none, and crossovers too."""
    plain = FuzzInput("plain text, no markers", DECLARE_TOOLS).encode()
    seen = mu.SeenInputs()
    assert not seen.add(decode(plain)) and seen.add(decode(plain))  # the second: a repeat

    def stale(seeds, **kwargs):
        return sum(not seen.fresh(mu.mutate(plain, 1024, s, **kwargs)) for s in seeds)

    assert stale(range(400), seen=seen) <= 12  # 8 tries: about 0.5 ** 8 of them stay stale
    assert stale(range(400)) <= 12  # the parent is in seen: a repeat of it is stale
    with monkeypatch.context() as patch:
        patch.setattr(mu, "ATTEMPTS", 1)  # one try, as before: about half are the parent
        assert stale(range(400), seen=seen) >= 100
    for data in [mu.mutate(plain, 1024, seed, seen=seen) for seed in range(200)]:
        seen.add(decode(data))  # a neighbourhood already run: fresh inputs rarer, still sought
    retried = stale(range(200, 400), seen=seen)
    with monkeypatch.context() as patch:
        patch.setattr(mu, "ATTEMPTS", 1)
        assert retried * 3 <= stale(range(200, 400), seen=seen)
    one, two = FuzzInput(ONE_CALL).encode(), FuzzInput(TWO_CALLS).encode()
    parents = mu.SeenInputs()
    for data in (one, two):
        parents.add(decode(data))
    assert all(parents.fresh(mu.crossover(one, two, 4096, seed, parents)) for seed in range(50))


def test_a_target_that_ignores_cuts_gets_no_mutation_of_only_its_cuts():
    """Without ``stream-recorded`` the differential target never reads the cut list: a
    mutation that moved only cuts (or a byte of the list) would rerun the same parse."""
    data = FuzzInput(ONE_CALL, DECLARE_TOOLS, (3, 9, 30)).encode()
    seen = mu.SeenInputs(reads_cuts=False)
    seen.add(decode(data))
    recut = FuzzInput(ONE_CALL, DECLARE_TOOLS, (5,)).encode()
    assert not seen.fresh(recut) and mu.SeenInputs().fresh(recut) is True
    for seed in range(300):
        out = decode(mu.mutate(data, 4096, seed, _byte_flips, seen))
        assert (out.flags, out.text) != (DECLARE_TOOLS, ONE_CALL)
    assert "split" not in seen.operations and "cuts" not in seen.operations


def test_a_target_that_sends_no_token_ids_gets_no_spelled_marker():
    """The reference target reads text only: spelling a marker changes no token id it sees."""
    data = FuzzInput(ONE_CALL, DECLARE_TOOLS).encode()
    seen = mu.SeenInputs(reads_tokens=False)
    seen.add(decode(data))
    spelled = FuzzInput(ONE_CALL, DECLARE_TOOLS | SPELLED).encode()
    assert not seen.fresh(spelled) and mu.SeenInputs().fresh(spelled)
    assert "spell" not in seen.operations and "spell" in mu.SeenInputs().operations


def test_dictionary_file_is_the_generated_one():
    assert (ROOT / "fuzz" / "kimi_k2.dict").read_text(encoding="utf-8") == dictionary_text()
    for marker in markers.TOOL_MARKERS + (markers.THINK_BEGIN, markers.THINK_END):
        assert f'"{marker}"' in dictionary_text()


def test_seed_corpus_is_built_from_the_case_corpus(tmp_path):
    count = build_seed_corpus(tmp_path)
    assert count >= 300 and len(list(tmp_path.iterdir())) == count
    assert build_seed_corpus(tmp_path) == count  # idempotent: named by content


def test_service_files_lay_out_every_target_for_oss_fuzz(tmp_path):
    """What .clusterfuzzlite/build.sh puts beside each executable: fuzz_NAME.options with the
    flags k2conform fuzz uses, and for the envelope targets the seed corpus zip and dictionary
    of the target's format (``differential_k3``: the K3 cases and markers); every service
    target has its script, and build.sh builds them all by default."""
    import zipfile

    from k2conform.fuzzing.targets import ENVELOPE_TARGETS, MAX_LEN, SERVICE_TARGETS, TARGETS

    assert set(TARGETS) < set(SERVICE_TARGETS)
    assert {p.stem.removeprefix("fuzz_") for p in (ROOT / "fuzz").glob("fuzz_*.py")} == set(
        SERVICE_TARGETS
    )
    build_sh = (ROOT / ".clusterfuzzlite" / "build.sh").read_text()
    assert f"K2FUZZ_TARGETS:-{' '.join(SERVICE_TARGETS)}}}" in build_sh
    build = [sys.executable, str(ROOT / "fuzz" / "build_seed_corpus.py"), "--service"]
    out = tmp_path / "out"
    done = subprocess.run([*build, str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for name, (target, format) in SERVICE_TARGETS.items():
        options = (out / f"fuzz_{name}.options").read_text()
        assert options.startswith("[libfuzzer]\n") and f"max_len = {MAX_LEN[target]}\n" in options
        archive = out / f"fuzz_{name}_seed_corpus.zip"
        assert archive.is_file() == (target in ENVELOPE_TARGETS)
        if target in ENVELOPE_TARGETS:
            seeds = tmp_path / f"seeds-{format}"
            count = build_seed_corpus(seeds, format=format)
            with zipfile.ZipFile(archive) as bundle:
                assert len(bundle.namelist()) == count
                for entry in bundle.namelist():
                    assert bundle.read(entry) == (seeds / entry).read_bytes()
            dictionary = (out / f"fuzz_{name}.dict").read_text(encoding="utf-8")
            assert dictionary == dictionary_text(format)
    again = tmp_path / "again"
    subprocess.run([*build, str(again)], capture_output=True, check=True, timeout=600)
    archive = "fuzz_reference_seed_corpus.zip"
    assert (again / archive).read_bytes() == (out / archive).read_bytes()  # the same every build


# -- property: the reference target on mutated well-formed outputs (hypothesis "ci" profile) ---


@given(completions(max_calls=4), st.integers(0, 2**32 - 1))
def test_reference_target_holds_on_mutated_completions(generated, seed):
    from k2conform.fuzzing.targets import reference_target

    check = reference_target()
    data = FuzzInput(generated.text, DECLARE_TOOLS if generated.tools else 0).encode()
    check(data)
    check(mu.mutate(data, 4096, seed))


# -- signatures -----------------------------------------------------------------------------------

CALL = ToolCall("get_weather", '{"city": "Paris"}', "functions.get_weather:0")


@pytest.mark.parametrize(
    ("observed", "kinds"),
    [
        (Result(content="Sure.", tool_calls=(CALL,)), ()),
        (
            Result(content="Sure.", tool_calls=(ToolCall("get_weather", '{"city":"Paris"}', "x"),)),
            (),
        ),
        (Result(content="Sure."), ("dropped-call",)),
        (
            Result(content="Sure." + SB + TB + "functions.get_weather:0"),
            ("dropped-call", "leaked-marker"),
        ),
        (Result(content="Sure.", tool_calls=(CALL, CALL)), ("extra-call",)),
        (
            Result(content="Sure.", tool_calls=(ToolCall("weather", CALL.arguments),)),
            ("wrong-name",),
        ),
        (
            Result(content="Sure.", tool_calls=(ToolCall("get_weather", '{"city": "Rome"}'),)),
            ("wrong-arguments",),
        ),
        (Result(content="Sure!", tool_calls=(CALL,)), ("content-drift",)),
        # vllm-project/vllm PR #50367: the answer streamed, then flushed again
        (Result(content="Sure.Sure.", tool_calls=(CALL,)), ("duplicate-emission", "content-drift")),
        (
            Result(content="Sure." + SB + "Sure.", tool_calls=(CALL,)),
            ("duplicate-emission", "leaked-marker"),
        ),
        (
            Result(content="Sure.", tool_calls=(ToolCall("get_weather", CALL.arguments * 2),)),
            ("duplicate-emission", "wrong-arguments"),
        ),
        (Result(content="Sure.", reasoning="hmhm"), ("dropped-call", "reasoning-drift")),
        (Result(content="Sure.", reasoning="hm", tool_calls=(CALL,)), ("reasoning-drift",)),
        (Result.failed("crash", "IndexError: list index out of range"), ("crash",)),
        (Result.failed("timeout", "no result"), ("timeout",)),
        (
            Result(
                content="Sure.",
                tool_calls=(CALL,),
                meta={
                    "stream_violations": [
                        {"kind": "id-resent", "detail": "chunk 3: id of index 0 sent again"}
                    ]
                },
            ),
            ("broken-stream",),
        ),
        # stream-interleaved: shared state made the stream drop its call beside another one
        (
            Result(
                content="Sure.",
                meta={
                    "stream_violations": [
                        {"kind": "cross-stream", "detail": "this stream: 3 chunks beside, 5 alone"}
                    ]
                },
            ),
            ("cross-stream", "dropped-call"),
        ),
    ],
)
def test_classifier_on_hand_made_disagreements(observed, kinds):
    expected = Result(content="Sure.", tool_calls=(CALL,))
    assert classify(expected, observed) == kinds


def test_a_marker_that_starts_like_the_expected_text_is_no_duplicate_emission():
    """``<|to`` is in every marker's text: a leaked section end after it is a leak, not the
    content emitted twice (both seen from the fuzzer on 5 Dec 2026 before the markers were
    left out of the count)."""
    expected = Result(content="<|to", reasoning="I should read it.")
    leaked = Result(content="<|to" + SE, reasoning="I should read it.")
    assert classify(expected, leaked) == ("leaked-marker",)
    twice = Result(content="<|to" + SE + "<|to", reasoning="I should read it.")
    assert classify(expected, twice) == ("duplicate-emission", "leaked-marker")
    assert classify(Result(content="ok"), Result(content="ok, ok")) == ("content-drift",)
    # the output says it twice: a parser that keeps both copies drifts, it emits nothing twice
    output = f"all{TB}all</think>{TE}"
    kept = Result(content=TE, reasoning=f"all{TB}all")
    assert "duplicate-emission" not in classify(Result(reasoning="all"), kept, output)
    assert "duplicate-emission" in classify(Result(reasoning="all"), kept)  # output unknown


def test_signature_keeps_one_kind_per_adapter_in_adapter_order():
    sig = signature(
        {"sglang": ("dropped-call", "leaked-marker"), "vllm": ("wrong-name",), "x": ()},
        ["vllm", "sglang", "x"],
    )
    assert sig == "vllm:wrong-name|sglang:dropped-call"
    assert parse_signature(sig) == {"vllm": ("wrong-name",), "sglang": ("dropped-call",)}
    assert components(sig) == ["vllm:wrong-name", "sglang:dropped-call"]
    assert matches("sglang:dropped-call", sig) and not matches("sglang:leaked-marker", sig)
    assert signature({"vllm": ()}) == ""


# -- minimiser ------------------------------------------------------------------------------------


@pytest.mark.skipif(not _available("sglang"), reason="SGLang is not installed")
def test_minimiser_shrinks_sglangs_partial_marker_leak_with_text_level_splits():
    from k2conform.fuzzing.differential import Differential
    from k2conform.minimize.delta_debug import minimize_input

    engine = Differential(["sglang"])
    request = FuzzInput(ONE_CALL, DECLARE_TOOLS).request()
    text = "Let me check. " + ONE_CALL
    observation, start, small, minimizer = minimize_input(engine, request, text, "stream-char")
    assert observation is not None and observation.signature.startswith("sglang:")
    assert (
        len(small.text) < len(start.text)
        and len(small.cuts) < len(start.cuts)
        and len(small.cuts) <= 3
    )
    # it still reproduces, from the case file alone, deterministically
    again = engine.observe(small.request, small.text, "stream-recorded", small.cuts)
    assert matches(minimizer.signature, again.signature)
    assert minimize_input(engine, request, text, "stream-char")[2] == small


def test_minimize_cli_on_an_agreeing_input_exits_1(tmp_path):
    payload = tmp_path / "ok.json"
    payload.write_text(json.dumps({"model_output": "hello", "delivery": "whole"}))
    done = subprocess.run(
        [K2CONFORM, "minimize", str(payload), "--adapter", "reference", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "no disagreement" in done.stderr


# -- instrumentation of the code under test ----------------------------------------------------

TOY_MODULE = """
import dataclasses
import functools
from json import dumps


def plain(x):
    return x + 1 if x > 0 else -x


def _twice(function):
    @functools.wraps(function)
    def wrapper(x):
        return function(function(x))
    return wrapper


@_twice
def decorated(x):
    return x * 2


class Parser:
    def method(self, x):
        return x or None

    @staticmethod
    def static(x):
        return x - 1

    @classmethod
    def klass(cls, x):
        return (cls.__name__, x)

    @property
    def size(self):
        return 3

    class Inner:
        def deep(self):
            return "deep"


@dataclasses.dataclass
class Point:
    x: int
"""
INSTRUMENTED = "__ATHERIS_INSTRUMENTED__"
NEEDS_PARSERS = pytest.mark.skipif(
    not (_available("vllm") and _available("sglang")), reason="needs vLLM and SGLang"
)


def test_instrumentation_patches_every_function_the_module_defines_only(tmp_path, monkeypatch):
    import atheris

    from k2conform.fuzzing.instrument import instrument_modules

    (tmp_path / "k2toy_fuzz_instrumented.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    counts = instrument_modules(["k2toy_fuzz_instrumented"], atheris)
    toy = sys.modules["k2toy_fuzz_instrumented"]
    parser = toy.Parser
    own = [
        toy.plain,
        toy._twice,
        toy.decorated,
        toy.decorated.__wrapped__,
        parser.method,
        parser.static,
        parser.klass.__func__,
        parser.size.fget,
        parser.Inner.deep,
    ]
    assert all(INSTRUMENTED in f.__code__.co_consts for f in own)
    assert counts == {"k2toy_fuzz_instrumented": len(own)}
    for foreign in (toy.dumps, toy.Point.__init__, toy.Point.__repr__):  # imported, generated
        assert INSTRUMENTED not in foreign.__code__.co_consts
    # the patched code still computes what it did
    assert (toy.plain(2), toy.plain(-3), toy.decorated(3), parser().method(0)) == (3, 3, 12, None)
    assert parser.static(1) == 0 and parser.klass(5) == ("Parser", 5)
    assert parser().size == 3 and parser.Inner().deep() == "deep"


def test_set_up_only_functions_are_left_unpatched(tmp_path, monkeypatch):
    """A function listed in ``SET_UP_ONLY`` for its module keeps its code (it still runs on
    every parse, untraced); the rest of the module is patched as before."""
    import atheris

    from k2conform.fuzzing import instrument

    (tmp_path / "k2toy_fuzz_set_up.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        instrument.SET_UP_ONLY, "k2toy_fuzz_set_up", ("plain", "Parser.method", "Gone.away")
    )
    counts = instrument.instrument_modules(["k2toy_fuzz_set_up"], atheris)
    toy = sys.modules["k2toy_fuzz_set_up"]
    assert counts == {"k2toy_fuzz_set_up": 7}  # nine functions, two left out
    for kept in (toy.plain, toy.Parser.method):
        assert INSTRUMENTED not in kept.__code__.co_consts
    assert INSTRUMENTED in toy.Parser.static.__code__.co_consts
    assert toy.plain(-3) == 3 and toy.Parser().method(0) is None


def test_set_up_only_names_functions_the_parser_modules_define():
    """Every name left out is a function of its module (a typo would instrument it silently)."""
    import importlib

    from k2conform.fuzzing.instrument import SET_UP_ONLY

    for module_name, names in SET_UP_ONLY.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            pytest.skip(f"{module_name} is not installed")
        for name in names:
            value = module
            for part in name.split("."):
                value = getattr(value, part)
            assert callable(value), (module_name, name)


def test_the_reference_stream_is_checked_before_a_new_finding_is_saved(tmp_path, monkeypatch):
    """A new signature: the reference's own stream parse is checked first (a HarnessBug when it
    differs); a known one is only counted, without the check (unless the input is sampled)."""
    from k2conform.fuzzing import targets
    from k2conform.fuzzing.differential import Differential, FindingStore, HarnessBug

    engine = Differential(["reference"])
    engine.adapters = [engine.reference]  # a stand-in under test that always disagrees
    engine.names = ["reference"]
    monkeypatch.setattr(targets, "REFERENCE_STREAM_SAMPLE", 1 << 40)  # no sampling here
    import k2conform.fuzzing.differential as engine_module

    monkeypatch.setattr(engine_module, "classify", lambda *args: ["content-drift"])
    checked = []
    verify = engine.verify_reference_stream
    engine.verify_reference_stream = lambda *a: (checked.append(a[1]), verify(*a))
    store = FindingStore(tmp_path / "findings", "differential")
    seen = mu.SeenInputs(reads_cuts=False)
    target = targets.differential_target(engine, ("whole", "stream-token"), store, seen)
    data = FuzzInput(ONE_CALL, DECLARE_TOOLS).encode()
    target(data)
    assert checked == [ONE_CALL] and len(store.files) == 2  # whole and stream-token saved
    assert store.repeats == 0
    target(data)
    assert checked == [ONE_CALL]  # known signatures: counted only
    assert store.counts == {k: 2 for k in store.files}
    assert store.repeats == 1 and store.executions == 2  # the second run repeated the first
    engine.verify_reference_stream = lambda *a: (_ for _ in ()).throw(HarnessBug("differs"))
    fresh = FindingStore(tmp_path / "elsewhere", "differential")
    with pytest.raises(HarnessBug):  # a finding the reference itself gets wrong is not saved
        targets.differential_target(engine, ("whole", "stream-token"), fresh, seen)(data)
    assert [Path(f).name.split("_")[2] for f in fresh.files.values()] == ["reference"]  # whole


DECLARED_INSTRUMENTATION = """
import json
import atheris
from k2conform.adapter.registry import create_adapter, load
from k2conform.fuzzing.instrument import declared_modules, instrument_modules
adapters = [create_adapter(name) for name in ("reference", "vllm", "sglang")]
for adapter in adapters:
    load(adapter)
counts = instrument_modules(declared_modules(adapters), atheris)
from vllm.parser.kimi_k2 import KimiK2Parser
declared = [[*a.coverage_files, *a.coverage_shared_files] for a in adapters]
patched = "__ATHERIS_INSTRUMENTED__" in KimiK2Parser.__init__.__code__.co_consts
print(json.dumps({"counts": counts, "declared": declared, "patched": patched}))
"""


@pytest.mark.slow
@NEEDS_PARSERS
def test_every_file_the_parser_adapters_declare_is_instrumented():
    """The modules come from the adapters' coverage declarations: each must import and have
    code to patch, or libFuzzer would steer by less than k2conform coverage measures.  (In a
    subprocess: the patched parsers would slow every later test of this worker.)"""
    done = subprocess.run(
        [sys.executable, "-c", DECLARED_INSTRUMENTATION],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    declared = [path for paths in report["declared"] for path in paths]
    assert len(report["counts"]) == len(declared), report
    assert all(n > 0 for n in report["counts"].values()), report
    assert "vllm.parser.kimi_k2" in report["counts"] and report["patched"]


# -- the atheris targets, briefly, in subprocesses
# ---------------------------------------------------


def _run_target(name, tmp_path, *flags, timeout=600):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / f"fuzz_{name}.py"),
            "--findings",
            str(tmp_path / "findings"),
            *flags,
            f"-artifact_prefix={tmp_path}/",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "stat::number_of_executed_units" in done.stderr
    return done


def test_reference_target_runs_without_crashing(tmp_path):
    seeds = tmp_path / "seeds"
    build_seed_corpus(seeds)
    (tmp_path / "work").mkdir()
    _run_target(
        "reference",
        tmp_path,
        "-runs=1500",
        "-max_len=4096",
        f"-dict={ROOT / 'fuzz' / 'kimi_k2.dict'}",
        str(tmp_path / "work"),
        str(seeds),
    )


@pytest.mark.slow
def test_differential_target_runs_and_saves_distinct_signatures(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for text in (ONE_CALL, TWO_CALLS, f"{SB}{TB}functions.get.weather:0{AB}{{}}{TE}{SE}"):
        (seeds / str(abs(hash(text)))).write_bytes(FuzzInput(text, DECLARE_TOOLS).encode())
    done = _run_target(
        "differential",
        tmp_path,
        "--delivery",
        "whole",
        "--delivery",
        "stream-recorded",
        "-runs=60",
        str(seeds),
    )
    table = tmp_path / "findings" / "signatures-differential.json"
    if _available("vllm") or _available("sglang"):
        data = json.loads(table.read_text())
        files = {row["file"] for row in data["signatures"]}
        assert files, "no disagreement of the real parsers with the reference was saved"
        assert len(files) == len(data["signatures"])  # one file per distinct signature
        for path in files:
            from k2conform.case.corpus import load_case

            assert load_case(path).generator["signature"]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@NEEDS_PARSERS
def test_instrumenting_the_parsers_grows_libfuzzers_coverage(tmp_path):
    """libFuzzer's ``cov:`` counts the parsers' branches only when their files are instrumented."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for k, text in enumerate((ONE_CALL, TWO_CALLS, "<think>hm</think>" + ONE_CALL)):
        flags = DECLARE_TOOLS | (THINKING if k == 2 else 0)
        (seeds / f"seed{k}").write_bytes(FuzzInput(text, flags).encode())
    coverage = {}
    for instrument in ("reference", "parsers"):
        (tmp_path / instrument).mkdir()
        done = _run_target(
            "differential",
            tmp_path / instrument,
            "--instrument",
            instrument,
            "-runs=20",
            str(seeds),
        )
        coverage[instrument] = int(re.findall(r"cov: (\d+)", done.stderr)[-1])
        assert ("vllm.parser.kimi_k2" in done.stderr) == (instrument == "parsers")
    assert coverage["parsers"] > coverage["reference"], coverage


@pytest.mark.slow
def test_roundtrip_target_runs_without_crashing(tmp_path):
    _run_target("roundtrip", tmp_path, "-runs=150", "-max_len=2048")


def test_fuzz_cli_reports_executions_per_second(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "fuzz",
            "reference",
            str(tmp_path),
            "--runs",
            "300",
            "--findings",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exec/s" in done.stdout and "300 executions" in done.stdout
    # the console script (under ``python -m k2conform.cli`` the module is __main__, another
    # UsageError class)
    usage = subprocess.run([K2CONFORM, "fuzz", "reference"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--seconds" in usage.stderr


def test_a_finding_past_the_end_of_turn_is_a_case_that_loads(tmp_path):
    """A fuzz input with text after <|im_end|>: its deliveries stop there (the server stops), and
    the saved case's recorded deltas still add up to its whole model_output, the rest as one
    more piece that a replay drops again."""
    from k2conform.case.corpus import load_case
    from k2conform.fuzzing.differential import Observation, finding_case, write_case_file
    from k2conform.model import Request

    text = f"Hi.{markers.IM_END}after the turn"
    delivered = ("H", "i.")
    observation = Observation(
        "stream-char", Result(content="Hi."), "vllm:extra-call", {"vllm": ("extra-call",)}, {},
        delivered,
    )  # fmt: skip
    case = finding_case(Request(), text, observation, "differential")
    loaded = load_case(write_case_file(case, tmp_path))
    assert "".join(loaded.deltas) == loaded.model_output == text
    assert loaded.deltas[: len(delivered)] == delivered


# -- several workers (k2conform fuzz --workers N) ----------------------------------------------


def _observation(sig: str = "vllm:extra-call"):
    from k2conform.fuzzing.differential import Observation

    return Observation(
        "whole", Result(content="Hi."), sig, {"vllm": ("extra-call",)}, {}, None
    )  # fmt: skip


def test_two_workers_save_each_signature_once_and_their_tables_merge(tmp_path):
    """Worker 1 loses the claim on a signature worker 0 saved: it only counts it; the merged
    table adds the counts and executions up and keeps the saving worker's file."""
    from k2conform.fuzzing.differential import FindingStore, format_table
    from k2conform.fuzzing.workers import merge_worker_tables, table_path
    from k2conform.model import Request

    stores = [FindingStore(tmp_path, "differential", worker=k) for k in (0, 1)]
    assert stores[0].record(Request(), "Hi.", _observation()) == ["whole vllm:extra-call"]
    for _ in range(3):
        assert stores[1].record(Request(), "Hi.", _observation()) == []  # claimed: counted only
        stores[1].tick()
    stores[1].record(Request(), "Hi.", _observation("sglang:extra-call"))
    stores[0].tick(repeated=True)
    for store in stores:
        store.save(force=True)
    cases = sorted(tmp_path.glob("*_fuzz_*.json"))
    assert len(cases) == 2  # one case file per signature between the two workers
    assert stores[1].files["whole vllm:extra-call"] == stores[0].files["whole vllm:extra-call"]
    assert not table_path(tmp_path, "differential").exists()  # each worker has its own table
    merged = merge_worker_tables(tmp_path, "differential", 2)
    assert merged is not None and merged["workers"] == 2 and merged["executions"] == 4
    rows = {row["key"]: row for row in merged["signatures"]}
    assert rows["whole vllm:extra-call"]["count"] == 4  # 1 (worker 0) + 3 (worker 1)
    assert rows["whole vllm:extra-call"]["file"] == stores[0].files["whole vllm:extra-call"]
    assert rows["whole vllm:extra-call"]["new"] and rows["whole sglang:extra-call"]["count"] == 1
    assert json.loads(table_path(tmp_path, "differential").read_text()) == merged
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(p.name for p in cases), "signatures-differential.json"]
    )  # the workers' tables and claims are gone
    assert merged["repeats"] == 1  # worker 0 said its execution repeated one
    assert "4 executions by 2 workers (1 of them, 25 %, repeated an earlier input)" in (
        format_table(merged)
    )
    # a single run (no worker) neither claims nor writes a worker table
    single = FindingStore(tmp_path / "one", "differential")
    single.record(Request(), "Hi.", _observation())
    names = [p.name for p in (tmp_path / "one").iterdir() if "_fuzz_" not in p.name]
    assert names == ["signatures-differential.json"]


def _fuzz_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", "fuzz", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_fuzz_cli_with_two_workers_adds_up_their_executions(tmp_path):
    done = _fuzz_cli("reference", str(tmp_path), "--runs", "301", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 workers, 301 executions" in done.stdout
    assert "worker 0: 151 executions" in done.stdout and "worker 1: 150 executions" in done.stdout
    started = [line for line in done.stderr.splitlines() if line.startswith("$ ")]
    assert [line.split("--worker ")[1].split()[0] for line in started] == ["0", "1"]
    pids = re.findall(r"worker \d: pid (\d+)", done.stderr)
    assert len(set(pids)) == 2  # two processes
    single = _fuzz_cli("reference", str(tmp_path), "--runs", "200")
    assert single.returncode == 0 and "200 executions" in single.stdout
    assert "--worker" not in single.stderr and "workers" not in single.stdout
    assert _fuzz_cli("reference", "--runs", "1", "--workers", "2").returncode == 2
    # a mode the fuzzers do not take is refused before libFuzzer starts, not a "crash"
    for mode in ("stream-coalesced", "server-stream", "stream-nothing"):
        refused = _fuzz_cli("differential", "--runs", "1", "--delivery", mode)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert mode in refused.stderr


CRASHING_WORKER = """
import sys, time
if sys.argv[sys.argv.index("--worker") + 1] == "0":
    time.sleep(1)
    print("artifact_prefix='./'; Test unit written to ./crash-0123abcd", file=sys.stderr)
    sys.exit(1)
time.sleep(120)
"""


def test_a_crashing_worker_stops_the_run_and_fails_it(tmp_path, capsys):
    import time

    from k2conform.fuzzing.cli import run_fuzz

    started = time.monotonic()
    command = [sys.executable, "-c", CRASHING_WORKER, "differential", "--findings", str(tmp_path)]
    assert run_fuzz("differential", command, None, 2, tmp_path) == 1
    assert time.monotonic() - started < 60  # the other worker was stopped, not waited for
    out = capsys.readouterr().out
    assert "crash: ./crash-0123abcd (worker 0)" in out
    assert "worker 1: ? executions, ? exec/s, exit -15 (stopped)" in out


def test_fuzz_cli_stops_its_workers_when_interrupted(tmp_path):
    import os
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "k2conform.cli", "fuzz", "reference", str(tmp_path)]
        + ["--seconds", "300", "--workers", "2", "--verbose"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    pids, running = [], set()
    deadline = time.monotonic() + 120
    for line in process.stderr:
        pids += [int(p) for p in re.findall(r"worker \d: pid (\d+)", line)]
        running |= set(re.findall(r"^\[(w\d)\] #\d+", line))
        if len(running) == 2 or time.monotonic() > deadline:
            break
    assert len(pids) == 2 and len(running) == 2, (pids, running)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "2 workers" in out and out.count("(stopped)") == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
@NEEDS_PARSERS
def test_differential_workers_share_one_findings_table(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for k, text in enumerate(
        (ONE_CALL, TWO_CALLS, f"{SB}{TB}functions.get.weather:0{AB}{{}}{TE}{SE}")
    ):
        (seeds / f"seed{k}").write_bytes(FuzzInput(text, DECLARE_TOOLS).encode())
    (tmp_path / "work").mkdir()
    findings = tmp_path / "findings"
    done = _fuzz_cli(
        "differential", str(tmp_path / "work"), str(seeds), "--runs", "40", "--workers", "2",
        "--delivery", "whole", "--delivery", "stream-recorded", "--findings", str(findings),
    )  # fmt: skip
    # 1: a mutation reached a behaviour the project does not know yet (the verdict says so)
    verdict = done.stdout.rstrip().splitlines()[-1]
    assert (done.returncode, verdict.split(": ")[1]) in ((0, "PASS"), (1, "NEW FINDINGS")), (
        done.stderr[-4000:]
    )
    total = re.search(r"2 workers, (\d+) executions", done.stdout)
    assert total and int(total.group(1)) >= 40, done.stdout
    table = json.loads((findings / "signatures-differential.json").read_text())
    assert table["workers"] == 2 and table["executions"] > 0
    from k2conform.case.corpus import load_case
    from k2conform.fuzzing.differential import axis

    saved = [load_case(p) for p in findings.glob("*_fuzz_*.json")]
    keys = [
        f"{axis(c.generator['delivery'], bool(c.spelled_markers))} {c.generator['signature']}"
        for c in saved
    ]
    assert sorted(keys) == sorted(row["key"] for row in table["signatures"])  # each once
    assert all(row["file"] for row in table["signatures"])
    assert not list(findings.glob("signatures-differential.worker-*"))
    assert not (findings / ".claims-differential").exists()


def test_the_fuzzers_take_only_adapters_of_the_format_they_mutate(monkeypatch):
    """K2 inputs judged by the K2 reference: a K3 adapter is left out of the default set, and
    naming one is a usage error (fed K2 output it would only show spurious findings)."""
    from k2conform.adapter import registry
    from k2conform.errors import UsageError
    from k2conform.fuzzing.differential import Differential

    monkeypatch.setattr(registry, "default_adapter_names", lambda: ["reference", "reference-k3"])
    assert Differential().names == []
    with pytest.raises(UsageError, match="reference-k3 parses k3 output"):
        Differential(["reference-k3"])
    done = subprocess.run(
        [K2CONFORM, "fuzz", "differential", "--adapter", "vllm-k3", "--runs", "5"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "vllm-k3 parses k3 output" in done.stderr


@pytest.mark.parametrize("mode", ["stream-after-cutoff", "stream-interleaved", "stream-token"])
def test_the_fuzzer_delivers_an_input_as_the_matrix_delivers_its_case(mode):
    """A finding's case file is judged by the matrix (``judge_finding``): the fuzzer must have
    made the same deliveries, the prelude and the partner calling the first declared tool."""
    from k2conform.case.corpus import CompletionCase
    from k2conform.delivery import modes
    from k2conform.fuzzing.differential import FUZZ_MODES, Differential
    from k2conform.model import Request

    engine = Differential(["reference"])
    request = Request(tools=({"type": "function", "function": {"name": "read_file"}},))
    text = f"Hi{SB}{TB}functions.read_file:0{AB}{{}}{TE}{SE}"
    case = CompletionCase("i_x", "", (), "test", request, text, None, None)
    matrix = modes.deliveries(
        text, mode, engine.tokenizer, tool=modes.cutoff_tool(case.request.tool_names)
    )
    assert engine.deliveries(request, text, mode) == matrix
    assert "read_file" in (matrix[0].variant or "read_file")
    # a seeded token-aligned mode draws from the case's id, which a finding has not yet
    assert "stream-coalesced" not in FUZZ_MODES and "stream-random" in FUZZ_MODES


# -- Kimi K3: the same fuzzers over the second format --------------------------------------------

K3_CALL = (
    'Let me check.<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" '
    'index="0"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
)


def test_every_format_has_its_fuzzing_syntax():
    from k2conform import formats
    from k2conform.fuzzing.syntax import SYNTAXES

    assert set(SYNTAXES) == set(formats.FORMATS)
    assert all(SYNTAXES[name].format == name for name in SYNTAXES)


def test_k3_inputs_declare_the_tools_their_calls_name_and_spell_k3_markers():
    """The envelope reads a K3 call's ``tool`` attribute (unescaped), and a spelled delivery
    spells one of K3's four special tokens, never a K2 marker."""
    from k2conform.k3 import markers as k3

    text = K3_CALL.replace('tool="get_weather"', 'tool="a&quot;b&amp;c"')
    fuzz = FuzzInput(text, DECLARE_TOOLS, None, k3.FORMAT)
    assert [t["function"]["name"] for t in fuzz.request().tools] == ['a"b&c']
    assert FuzzInput(text, DECLARE_TOOLS).request().tools[0]["function"]["name"] == "get_weather"
    spelled = FuzzInput(K3_CALL, DECLARE_TOOLS | SPELLED, None, k3.FORMAT).spelled_markers()
    assert len(spelled) == 1 and K3_CALL.startswith(k3.MARKERS, spelled[0])
    assert decode(fuzz.encode(), k3.FORMAT) == FuzzInput(text, DECLARE_TOOLS, None, k3.FORMAT)


def test_the_mutator_moves_k3_tags_and_rewrites_k3_calls():
    """Every text operation acts on a K3 call (none leaves it unchanged on every seed), the
    result stays a K3 input, and the call-level ones change what the K3 reference reads:
    ``index`` the call's index attribute, ``name`` its tool (attribute escapes included),
    ``splice`` an argument's attributes and value."""
    from k2conform.k3 import markers as k3
    from k2conform.k3.parser import parse

    fuzz = FuzzInput(K3_CALL, DECLARE_TOOLS, None, k3.FORMAT)
    for operation in mu.TEXT_OPERATIONS:
        after = [mu.apply(operation, fuzz, random.Random(seed)) for seed in range(12)]
        assert all(a.format == k3.FORMAT for a in after)
        assert any(a.text != K3_CALL for a in after), operation
    indexes = {mu.apply("index", fuzz, random.Random(s)).text for s in range(30)}
    assert {re.search(r'index="([^"]*)"', t)[1] for t in indexes} - {"0"}
    names = set()
    for seed in range(60):
        text = mu.apply("name", fuzz, random.Random(seed)).text
        names.update(c.name for c in parse(text, fuzz.request()).tool_calls)
    assert {'a"b', "a&b", "search.web"} <= names
    spliced = {mu.apply("splice", fuzz, random.Random(s)).text for s in range(30)}
    assert any('key="days" type="number"' in t for t in spliced)
    assert all(
        t.endswith(
            "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
            "<|close|>message<|sep|>"
        )
        for t in spliced
    )
    moved = decode(mu.mutate(fuzz.encode(), 2048, 5, None, None, k3.FORMAT), k3.FORMAT)
    assert moved.format == k3.FORMAT and moved.text != K3_CALL
    assert K2_SYNTAX.occurrence.search(moved.text) is None  # no K2 marker put in


def test_k3_seeds_are_the_k3_cases_and_its_dictionary_is_committed(tmp_path, corpus):
    from k2conform.fuzzing.seeds import dictionary_file, dictionary_text, seed_inputs

    k3_cases = [c for c in corpus.completions if c.format == "k3"]
    seeds = seed_inputs(format="k3")
    assert sorted(s.text for s in seeds) == sorted(c.model_output for c in k3_cases)
    assert all(s.format == "k3" for s in seeds)
    assert not {s.text for s in seeds} & {s.text for s in seed_inputs()}
    assert build_seed_corpus(tmp_path, format="k3") == len({s.encode() for s in seeds})
    committed = (ROOT / "fuzz" / dictionary_file("k3")).read_text(encoding="utf-8")
    assert committed == dictionary_text("k3") and '"<|sep|>"' in committed


def test_a_k3_leak_is_a_leaked_marker_by_the_k3_markers():
    """``<|close|>message<|sep|>`` streamed into content (vllm-project/vllm#51412) is a leak of
    K3's markers; judged by K2's it would only be drift."""
    from k2conform.formats import FORMATS

    expected = Result(content="It is sunny.")
    leaked = Result(content="It is sunny.<|close|>message<|sep|>")
    assert classify(expected, leaked, leaks=FORMATS["k3"].leak_markers) == ("leaked-marker",)
    assert classify(expected, leaked) == ("content-drift",)


@NEEDS_PARSERS
def test_the_k3_differential_finds_what_the_matrix_records(corpus):
    """The K3 reference is the oracle and vllm-k3 and sglang-k3 the adapters under test: a
    K3 case whose cells the baseline records as a lost call gives a ``dropped-call`` finding,
    and its finding's case is a K3 case with the K3 verdict rule's prefix."""
    from k2conform.fuzzing.differential import Differential, finding_case
    from k2conform.fuzzing.seeds import fuzz_input

    engine = Differential(format="k3")
    assert engine.reference.name == "reference-k3"
    assert engine.names == ["vllm-k3", "sglang-k3"]
    case = next(c for c in corpus.completions if c.id == "n_k3_max_tokens_inside_call")
    fuzz = fuzz_input(case)
    observation = engine.observe(fuzz.request(), fuzz.text, "whole")
    assert "dropped-call" in observation.kinds["vllm-k3"], observation.signature
    found = finding_case(fuzz.request(), fuzz.text, observation, "differential-k3")
    assert found.format == "k3" and found.id.startswith("n_fuzz_")
    # judged by K3's markers: the message closer streamed into content (vllm-project/vllm#51399)
    # is a leak, not drift
    leak = next(
        c for c in corpus.completions if c.id == "n_k3_message_close_without_response_close"
    )
    kinds = engine.observe(leak.request, leak.model_output, "stream-token").kinds
    assert kinds["vllm-k3"] == ("leaked-marker",), kinds
    spelled = dataclasses.replace(observation, spelled=(fuzz.text.index("<|close|>"),))
    assert finding_case(fuzz.request(), fuzz.text, spelled, "differential-k3").id[:2] == "i_"


def test_the_k3_fuzz_cli_refuses_what_it_cannot_fuzz():
    for argv in (
        ["fuzz", "reference", "--format", "k3", "--runs", "5"],
        ["fuzz", "differential", "--format", "k3", "--adapter", "vllm", "--runs", "5"],
    ):
        done = subprocess.run([K2CONFORM, *argv], capture_output=True, text=True)
        assert done.returncode == 2, (argv, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
@NEEDS_PARSERS
def test_k2conform_fuzz_differential_format_k3_runs_and_judges_its_findings(tmp_path):
    """The whole path over K3: seeds from the K3 cases, findings in their own table
    (``signatures-differential-k3.json``) as K3 case files, each judged as the matrix judges
    it, and the verdict line."""
    from k2conform.case.corpus import load_case

    findings = tmp_path / "findings"
    build_seed_corpus(tmp_path / "seeds", format="k3")
    (tmp_path / "work").mkdir()
    done = subprocess.run(
        [
            K2CONFORM,
            "fuzz",
            "differential",
            str(tmp_path / "work"),
            str(tmp_path / "seeds"),
            "--format",
            "k3",
            "--runs",
            "150",
            "--findings",
            str(findings),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "k2conform fuzz differential-k3: " in done.stdout
    table = json.loads((findings / "signatures-differential-k3.json").read_text())
    assert table["signatures"], "no K3 disagreement found from the K3 seeds"
    for row in table["signatures"]:
        case = load_case(row["file"])
        assert case.format == "k3" and case.generator["class"] == "FUZZ.differential-k3"
    assert not (findings / "signatures-differential.json").exists()


@NEEDS_PARSERS
def test_minimize_shrinks_a_k3_finding_by_whole_k3_tags(corpus):
    """The minimiser deletes a K3 tag (name and attributes) as one unit, judges candidates by
    the K3 reference and verdict rule, and keeps the finding: a K3 case comes out, shorter."""
    from k2conform.fuzzing.differential import Differential
    from k2conform.fuzzing.syntax import K3
    from k2conform.minimize.delta_debug import minimize_input, segments

    opener = '<|open|>call tool="get_weather" index="0"<|sep|>'
    assert (K3_CALL.index(opener), K3_CALL.index(opener) + len(opener)) in segments(
        K3_CALL, False, False, K3
    )
    case = next(c for c in corpus.completions if c.id == "n_k3_max_tokens_inside_call")
    engine = Differential(["vllm-k3"], format="k3")
    observation, start, small, minimizer = minimize_input(
        engine, case.request, case.model_output, "whole", target_signature="vllm-k3:dropped-call"
    )
    assert observation is not None and "dropped-call" in observation.kinds["vllm-k3"]
    assert small.format == start.format == "k3" and len(small.text) < len(start.text)
    assert observation.format == "k3"
    # the matrix's judgement it held is the baseline's for the case: the call is lost
    held = minimizer.engine.start_cells["vllm-k3"]
    assert (held.outcome.value, tuple(held.fields)) == ("differs", ("count",))


def test_the_differential_target_reads_inputs_in_its_engines_format():
    """The target decodes every input in its engine's format: a K3 call's tool is declared."""
    from types import SimpleNamespace

    from k2conform.fuzzing.mutator import SeenInputs
    from k2conform.fuzzing.targets import differential_target

    requests = []

    class Engine:
        format = "k3"

        def oracle(self, request, text):
            requests.append(request)
            return Result(content=text)

        def observe(self, request, text, mode, cuts, **options):
            return SimpleNamespace(signature="")

    store = SimpleNamespace(tick=lambda repeated: None)
    target = differential_target(Engine(), ("whole",), store, SeenInputs())
    target(FuzzInput(K3_CALL.replace("get_weather", "search"), DECLARE_TOOLS).encode())
    assert [t["function"]["name"] for t in requests[0].tools] == ["search"]


@pytest.mark.slow
@NEEDS_PARSERS
def test_the_k3_service_target_fuzzes_k3_output(tmp_path):
    """``fuzz/fuzz_differential_k3.py`` (what a service runs with libFuzzer flags only) is the
    differential target over K3 output: its findings go to the K3 table as K3 cases."""
    seeds = tmp_path / "seeds"
    build_seed_corpus(seeds, format="k3")
    done = _run_target("differential_k3", tmp_path, "-runs=40", str(seeds))
    assert "differential-k3: adapters vllm-k3, sglang-k3" in done.stderr
    table = json.loads((tmp_path / "findings" / "signatures-differential-k3.json").read_text())
    assert table["executions"] >= 40 and table["signatures"]
