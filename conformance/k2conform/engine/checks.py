"""Checks of a live Kimi engine, collected by the k2conform pytest plugin (``--k2-engine-url``).

Every failure message starts with ``[k2 check NAME]``, NAME one of ``CHECKS``, then the
probe and what was seen.  Requests go through the official ``openai`` client at
temperature 0 with a fixed seed.  The probes are those of the engine's format
(``plugin.engine_format``), and the format's record says which marker bytes leak and what
id a call carries (``formats.Format``).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

import pytest

from k2conform import markers
from k2conform.judge.compare import json_equal, strict_json
from k2conform.case.corpus import ProbeCase, load_corpus
from k2conform.model import StreamEvent, StreamKind, StreamViolation, ToolCallDelta
from k2conform.engine.plugin import SUMMARY_KEY, EngineSummary, engine_format
from k2conform.formats import FORMATS
from k2conform.judge.stream import assemble
from k2conform.model import WireKind
from k2conform.judge.wire import (
    RULES,
    check_stream,
    check_stream_vs_whole,
    check_whole,
    parse_sse,
)
from k2conform.reference.render import DEFAULT_SYSTEM_PROMPT

CHECKS = {
    "prompt": "the chat renders to the golden prompt stream (server's /tokenize + /detokenize)",
    "declared-tool": "every returned call names a declared tool",
    "named-choice": "a named tool_choice is the tool called",
    "arguments-json": "arguments parse as JSON",
    "arguments-schema": "arguments validate against the tool's JSON schema",
    "finish-reason": "finish_reason is tool_calls when calls are returned",
    "content-markers": "content carries no marker bytes of the format",
    "id-format": (
        "ids are the model's own, K2's functions.NAME:IDX (what Kimi K2 reads back in history); "
        "K3 output carries no id, so a K3 server's are not checked"
    ),
    "id-round-trip": (
        "ids are unique across the conversation and the next turn, carrying them, is accepted "
        "(and, where the format's model reads ids back, rendered)"
    ),
    "sse-invariants": (
        "id and name once per index, contiguous indexes, no markers in content deltas"
    ),
    "liveness": (
        "a long call's arguments stream as they are generated, not held back to one chunk "
        "(judge.stream.HELD_BACK; vllm-project/vllm#50604)"
    ),
    "stream-vs-whole": "streaming and non-streaming return the same calls and finish_reason",
    "summary": "schema accuracy and trigger agreement reach the thresholds",
    # the wire contract, one check per kind (judge.wire.RULES: the rule and its source)
    **{kind.value: f"({contract}) {rule}" for kind, (contract, rule) in RULES.items()},
    "concurrent-streams": (
        "a stream sent beside others (--k2-concurrency N) equals the same stream sent alone"
    ),
}
#: The most model output one chunk of a live engine's stream may carry, the liveness check's
#: ``fed`` (``judge.stream.assemble``): an engine streams what it generated since its last chunk,
#: one token, or a few when it coalesces (vLLM's stream interval, outputs merged under load);
#: 64 characters is 16 tokens of 4, so an argument chunk of 1,024 characters or more
#: (``HELD_BACK``), over twice what the call sent before, was held back.
LIVE_CHUNK_CHARS = 64
#: The format of the golden prompt streams (the K2 chat template's).
PROMPT_FORMAT = markers.FORMAT
_CORPUS = load_corpus(os.environ.get("K2CONFORM_PLUGIN_CORPUS") or None)


def _config_corpus(config: pytest.Config) -> Any:
    root = config.getoption("k2_corpus")
    return load_corpus(root) if root else _CORPUS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    corpus = _config_corpus(metafunc.config)
    format, _ = engine_format(metafunc.config)
    if "prompt_case" in metafunc.fixturenames:
        if format == PROMPT_FORMAT:
            prompts = [pytest.param(c, id=c.id) for c in corpus.prompts]
        else:
            skip = pytest.mark.skip(
                reason=f"no golden {format} prompt streams: its renderer ships with the model "
                "(docs/k3.md)"
            )
            prompts = [pytest.param(None, id=f"no-{format}-prompts", marks=skip)]
        metafunc.parametrize("prompt_case", prompts)
    if "probe" in metafunc.fixturenames:
        probes = [p for p in corpus.probes if p.format == format]
        if metafunc.function.__name__ == "test_probe_follow_up":
            probes = [p for p in probes if p.follow_up is not None]
        metafunc.parametrize("probe", probes, ids=[p.id for p in probes])


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def engine(pytestconfig: pytest.Config) -> dict[str, Any]:
    var = pytestconfig.getoption("k2_api_key_env")
    return {
        "url": pytestconfig.getoption("k2_engine_url").rstrip("/"),
        "model": pytestconfig.getoption("k2_model"),
        "key_var": var,
        "seed": pytestconfig.getoption("k2_seed"),
        "timeout": pytestconfig.getoption("k2_timeout"),
        "script": pytestconfig.getoption("k2_script"),
        "concurrency": pytestconfig.getoption("k2_concurrency"),
    }


@pytest.fixture(scope="session")
def client(engine: dict[str, Any]) -> Any:
    import openai

    var = engine["key_var"]
    return openai.OpenAI(
        base_url=engine["url"],
        api_key=os.environ[var] if var else "EMPTY",
        timeout=engine["timeout"],
        max_retries=0,
    )


@pytest.fixture(scope="session")
def summary(pytestconfig: pytest.Config) -> EngineSummary:
    return pytestconfig.stash[SUMMARY_KEY]


@pytest.fixture(scope="session")
def replies() -> dict[tuple[str, str], Any]:
    """Each probe's answers, asked once per session and shared by the checks."""
    return {}


class Checker:
    """Collects every failed check of one test; ``done()`` fails the test naming them all."""

    def __init__(self, probe_id: str, summary: EngineSummary) -> None:
        self.probe_id = probe_id
        self.summary = summary
        self.failures: list[str] = []

    def __call__(self, name: str, ok: bool, message: str) -> None:
        assert name in CHECKS
        if not ok:
            self.summary.failed_checks[name] = self.summary.failed_checks.get(name, 0) + 1
            self.failures.append(f"[k2 check {name}] {self.probe_id}: {message}")

    def done(self) -> None:
        if self.failures:
            pytest.fail("\n".join(self.failures), pytrace=False)


# --- helpers ------------------------------------------------------------------------------------


def _root(url: str) -> str:
    return url[:-3] if url.endswith("/v1") else url


def _post_raw(engine: dict[str, Any], path: str, body: Mapping[str, Any]) -> Any:
    """POST to the server root (vLLM's /tokenize is not under /v1); None on 404/405."""
    headers = {"Content-Type": "application/json"}
    if engine["key_var"]:
        headers["Authorization"] = "Bearer " + os.environ[engine["key_var"]]
    request = urllib.request.Request(
        _root(engine["url"]) + path, data=json.dumps(body).encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=engine["timeout"]) as response:  # noqa: S310 - user's URL
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code in (404, 405):
            return None
        raise AssertionError(f"{path} answered HTTP {error.code}") from None


def _post_wire(engine: dict[str, Any], probe: ProbeCase, stream: bool) -> str:
    """The chat request as raw bytes on the wire (the ``openai`` client hides the SSE framing
    and tolerates what the wire checks exist to catch); the reply's body as text."""
    kwargs = _kwargs(engine, probe, probe.messages)
    body = {**kwargs, **kwargs.pop("extra_body", {})}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Content-Type": "application/json"}
    if engine["key_var"]:
        headers["Authorization"] = "Bearer " + os.environ[engine["key_var"]]
    request = urllib.request.Request(
        engine["url"] + "/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=engine["timeout"]) as response:  # noqa: S310 - user's URL
        return response.read().decode("utf-8", errors="replace")


def _ask_wire(engine: dict[str, Any], probe: ProbeCase) -> dict[str, Any]:
    """One raw streamed and one raw non-streamed reply, and (``--k2-concurrency N``) N raw
    streams sent at once."""
    chunks, framing = parse_sse(_post_wire(engine, probe, stream=True))
    whole = json.loads(_post_wire(engine, probe, stream=False))
    crowd: list[Any] = []
    if engine["concurrency"] > 1:
        start = threading.Barrier(engine["concurrency"])

        def one(_: int) -> list[dict[str, Any]]:
            start.wait()
            return parse_sse(_post_wire(engine, probe, stream=True))[0]

        with ThreadPoolExecutor(engine["concurrency"]) as pool:
            crowd = list(pool.map(one, range(engine["concurrency"])))
    return {"chunks": chunks, "framing": framing, "whole": whole, "crowd": crowd}


def _seen(chunks: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What a client keeps of a stream, less what differs by design between two requests (the
    response id and time, usage): content, the calls' names and arguments, the finish_reason."""
    content, calls, finish = [], {}, None
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or ():
                name, arguments = calls.get(call.get("index"), ("", ""))
                function = call.get("function") or {}
                calls[call.get("index")] = (
                    name + (function.get("name") or ""),
                    arguments + (function.get("arguments") or ""),
                )
            finish = choice.get("finish_reason") or finish
    return "".join(content), sorted(calls.items(), key=lambda item: str(item[0])), finish


def _render(engine: dict[str, Any], messages: Any, tools: Any) -> str | None:
    """The server's rendering of a conversation, or None when it cannot render one."""
    body = {"model": engine["model"], "messages": list(messages), "add_generation_prompt": True}
    if tools:
        body["tools"] = list(tools)
    tokenized = _post_raw(engine, "/tokenize", body)
    if tokenized is None or "tokens" not in tokenized:
        return None
    detokenized = _post_raw(
        engine, "/detokenize", {"model": engine["model"], "tokens": tokenized["tokens"]}
    )
    if detokenized is None:
        return None
    return detokenized["prompt"]


def _kwargs(engine: dict[str, Any], probe: ProbeCase, messages: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": engine["model"],
        "messages": list(messages),
        "temperature": 0,
        "seed": engine["seed"],
        "tools": list(probe.tools),
        "tool_choice": probe.tool_choice,
    }
    if engine.get("script"):
        kwargs["extra_body"] = {
            "vllm_xargs": {"k2conform_script": json.dumps(_script(probe, messages))}
        }
    return kwargs


def _script(probe: ProbeCase, messages: Any) -> list[int]:
    """The token ids of the probe's replay for this turn, as the forcing logits processor takes
    them (the stand-in tokenizer's ids are the served tokenizer's; the end of turn is added by
    it)."""
    from k2conform.delivery.modes import engine_output
    from k2conform.delivery.tokenizer import load_tokenizer

    turn = sum(1 for m in list(messages)[len(probe.messages) :] if m.get("role") == "assistant")
    text = engine_output(probe.replay[min(turn, len(probe.replay) - 1)])
    return [i for i, _ in load_tokenizer().tokenize_spans(text)]


def _ask_whole(
    client: Any, engine: dict[str, Any], probe: ProbeCase, messages: Any
) -> dict[str, Any]:
    response = client.chat.completions.create(**_kwargs(engine, probe, messages))
    choice = response.choices[0]
    message = choice.message
    calls = [
        {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
        for tc in (message.tool_calls or [])
    ]
    return {"content": message.content, "calls": calls, "finish_reason": choice.finish_reason}


def _ask_stream(
    client: Any, engine: dict[str, Any], probe: ProbeCase, messages: Any
) -> dict[str, Any]:
    events, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **_kwargs(engine, probe, messages)):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.finish_reason is not None:
            finish = choice.finish_reason
        delta = choice.delta
        if delta is None:
            continue
        calls = tuple(
            ToolCallDelta(
                index=tc.index,
                id=tc.id,
                name=tc.function.name if tc.function else None,
                arguments=tc.function.arguments if tc.function else None,
            )
            for tc in (delta.tool_calls or ())
        )
        reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
        events.append(StreamEvent(content=delta.content, reasoning=reasoning, tool_calls=calls))
    assembled = assemble(events, LIVE_CHUNK_CHARS, leaks=FORMATS[probe.format].leak_markers)
    calls = [
        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in assembled.result.tool_calls
    ]
    return {
        "content": assembled.result.content,
        "calls": calls,
        "finish_reason": finish,
        "violations": [v.to_json() for v in assembled.violations],
    }


def _reply(replies: dict, key: tuple[str, str], ask: Any) -> dict[str, Any]:
    if key not in replies:
        try:
            replies[key] = ask()
        except Exception as error:  # noqa: BLE001 - recorded once, reported by every check that needs it
            replies[key] = {"error": f"{type(error).__name__}: {_scrub(str(error))}"}
    reply = replies[key]
    if "error" in reply:
        pytest.fail(
            f"[k2 check request] {key[0]}: the engine failed the {key[1]} request: "
            f"{reply['error']}",
            pytrace=False,
        )
    return reply


def _scrub(text: str) -> str:
    """Never let an API key that a server echoes back reach a report."""
    for var, value in os.environ.items():
        if value and len(value) >= 8 and "KEY" in var.upper() and value in text:
            text = text.replace(value, "***")
    return text


def _check_calls(
    check: Checker, probe: ProbeCase, reply: dict[str, Any], summary: EngineSummary | None
) -> None:
    """The per-call checks shared by the whole and streamed answers."""
    tools = {t["function"]["name"]: t["function"] for t in probe.tools}
    content = reply["content"] or ""
    leaked = [m for m in FORMATS[probe.format].leak_markers if m in content]
    check(
        "content-markers", not leaked, f"content carries marker bytes {leaked}: {content[:160]!r}"
    )
    calls = reply["calls"]
    if calls:
        check(
            "finish-reason",
            reply["finish_reason"] == "tool_calls",
            f"finish_reason is {reply['finish_reason']!r} but {len(calls)} tool call(s) were "
            "returned",
        )
    for n, call in enumerate(calls):
        check(
            "declared-tool",
            call["name"] in tools,
            f"call {n} names {call['name']!r}, not a declared tool ({', '.join(tools)})",
        )
        if isinstance(probe.tool_choice, dict):
            named = probe.tool_choice["function"]["name"]
            check(
                "named-choice",
                call["name"] == named,
                f"call {n} is {call['name']!r}, the named tool_choice is {named!r}",
            )
        ok, value = strict_json(call["arguments"] or "")
        if summary is not None:
            summary.calls += 1
        check(
            "arguments-json",
            ok,
            f"call {n} ({call['name']}) arguments are not JSON: {call['arguments']!r}",
        )
        schema = tools[call["name"]].get("parameters") or {}
        error = _schema_error(value, schema)
        if summary is not None and error is None:
            summary.schema_valid += 1
        check(
            "arguments-schema",
            error is None,
            f"call {n} ({call['name']}) arguments {call['arguments']!r}: {error}",
        )


def _schema_error(value: Any, schema: Mapping[str, Any]) -> str | None:
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        return error.message
    return None


def _check_ids(check: Checker, reply: dict[str, Any], format: str) -> None:
    pattern = FORMATS[format].call_id
    if pattern is None:
        return  # the format writes no id: a server mints its own
    for n, call in enumerate(reply["calls"]):
        match = pattern.fullmatch(call["id"] or "")
        check(
            "id-format",
            match is not None and match["name"] == call["name"],
            f"call {n} ({call['name']}) has id {call['id']!r}, not functions.{call['name']}:IDX",
        )


def _check_trigger(
    check: Checker, expect: Mapping[str, Any], calls: list, summary: EngineSummary | None
) -> None:
    wanted = expect["calls"]
    if wanted == "any":
        return
    # What the model chose (call or not, how many, which tool) is a statistic in the summary,
    # judged like K2-Vendor-Verifier against the probe's recorded reference decision; only
    # server-level promises are test failures.
    if summary is None:
        return
    called, expected_call = bool(calls), wanted == "required"
    summary.trigger_total += 1
    allowed = expect.get("names")
    summary.trigger_agree += (
        called == expected_call
        and len(calls) >= expect.get("min_calls", 0)
        and not (allowed and any(c["name"] not in allowed for c in calls))
    )
    summary.trigger_tp += called and expected_call
    summary.trigger_fp += called and not expected_call
    summary.trigger_fn += expected_call and not called


#: The spec's whitespace artifact: when no system message is given, the template injects the
#: default system prompt, and nothing, "\n" or "\n  " may stand between it and the first
#: <|im_user|> (harmless: it tokenizes around the markers).  Any other difference fails.
DEFAULT_SYSTEM_TURN = f"<|im_system|>system<|im_middle|>{DEFAULT_SYSTEM_PROMPT}<|im_end|>"
DEFAULT_SYSTEM_ARTIFACTS = ("", "\n", "\n  ")


def prompt_matches(expected: str, rendered: str) -> tuple[bool, str | None]:
    """Whether ``rendered`` is the golden stream, up to the default-system artifact; and which
    artifact the server wrote after an injected default system prompt (None: no such turn)."""
    start = expected.find(DEFAULT_SYSTEM_TURN + "\n")
    if start < 0:
        return rendered == expected, None
    head = expected[: start + len(DEFAULT_SYSTEM_TURN)]
    tail = expected[start + len(DEFAULT_SYSTEM_TURN) + 1 :]
    for artifact in DEFAULT_SYSTEM_ARTIFACTS:
        if rendered == head + artifact + tail:
            return True, artifact
    return False, None


# --- the checks ----------------------------------------------------------------------------------


def test_prompt_conformance(engine, prompt_case):
    """The server renders each golden conversation to the golden prompt stream."""
    rendered = _render(engine, prompt_case.messages, prompt_case.tools)
    if rendered is None:
        pytest.skip("the server cannot render a chat: no /tokenize with messages (vLLM's) endpoint")
    if prompt_case.add_generation_prompt is False:
        pytest.skip("/tokenize renders with the generation prompt; this golden stream has none")
    ok, artifact = prompt_matches(prompt_case.expected_prompt, rendered)
    assert ok, (
        f"[k2 check prompt] {prompt_case.id}: the server's rendering differs from the golden "
        "prompt stream\n"
        f"  expected: {prompt_case.expected_prompt!r}\n  rendered: {rendered!r}"
    )
    if artifact is not None:
        print(
            f"[k2 prompt] {prompt_case.id}: after the injected default system prompt the server "
            f"wrote {artifact!r}"
        )


def test_probe_whole(engine, client, probe, replies, summary):
    reply = _reply(
        replies, (probe.id, "whole"), lambda: _ask_whole(client, engine, probe, probe.messages)
    )
    summary.count_finish(reply["finish_reason"])
    check = Checker(probe.id, summary)
    _check_trigger(check, probe.expect, reply["calls"], summary)
    _check_calls(check, probe, reply, summary)
    _check_ids(check, reply, probe.format)
    check.done()


def test_probe_stream(engine, client, probe, replies, summary):
    reply = _reply(
        replies, (probe.id, "stream"), lambda: _ask_stream(client, engine, probe, probe.messages)
    )
    check = Checker(probe.id, summary)
    violations = [StreamViolation.from_json(v) for v in reply["violations"]]
    for name, broken in (
        ("sse-invariants", [v for v in violations if v.kind is not StreamKind.HELD_BACK]),
        ("liveness", [v for v in violations if v.kind is StreamKind.HELD_BACK]),
    ):
        check(name, not broken, "; ".join(str(v) for v in broken))
    _check_calls(check, probe, reply, None)
    whole = _reply(
        replies, (probe.id, "whole"), lambda: _ask_whole(client, engine, probe, probe.messages)
    )
    w = [(c["name"], c["arguments"]) for c in whole["calls"]]
    s = [(c["name"], c["arguments"]) for c in reply["calls"]]
    same = len(w) == len(s) and all(
        wn == sn
        and (
            json_equal(strict_json(wa)[1], strict_json(sa)[1])
            if strict_json(wa)[0] and strict_json(sa)[0]
            else wa == sa
        )
        for (wn, wa), (sn, sa) in zip(w, s)
    )
    check(
        "stream-vs-whole",
        same,
        f"non-streaming calls {w} but streaming calls {s} (temperature 0, seed {engine['seed']})",
    )
    check(
        "stream-vs-whole",
        whole["finish_reason"] == reply["finish_reason"],
        f"finish_reason {whole['finish_reason']!r} non-streaming, {reply['finish_reason']!r} "
        "streaming",
    )
    if FORMATS[probe.format].call_id is not None:  # ids a server mints (K3's) differ per request
        check(
            "stream-vs-whole",
            [c["id"] for c in whole["calls"]] == [c["id"] for c in reply["calls"]],
            f"ids {[c['id'] for c in whole['calls']]} non-streaming, "
            f"{[c['id'] for c in reply['calls']]} streaming",
        )
    check.done()


def test_probe_wire(engine, probe, replies, summary):
    """The wire contract (judge.wire), on the raw SSE frames and JSON the server sends."""
    reply = _reply(replies, (probe.id, "wire"), lambda: _ask_wire(engine, probe))
    chunks = reply["chunks"]
    violations = [
        *reply["framing"],
        *check_stream(chunks, include_usage=True),
        *check_whole(reply["whole"]),
        *check_stream_vs_whole(chunks, reply["whole"]),
    ]
    check = Checker(probe.id, summary)
    for kind in WireKind:
        found = [str(v) for v in violations if v.kind is kind]
        check(kind.value, not found, "; ".join(found))
    solo = _seen(chunks)
    for n, other in enumerate(reply["crowd"]):
        check(
            "concurrent-streams",
            _seen(other) == solo,
            f"stream {n + 1} of {len(reply['crowd'])} sent at once: {_seen(other)!r}; "
            f"alone: {solo!r}",
        )
    check.done()


def test_probe_follow_up(engine, client, probe, replies, summary):
    """Send the tool results back under the returned ids; the next turn must accept them."""
    first = _reply(
        replies, (probe.id, "whole"), lambda: _ask_whole(client, engine, probe, probe.messages)
    )
    check = Checker(probe.id, summary)
    ids = [c["id"] for c in first["calls"]]
    check(
        "id-round-trip",
        bool(ids) and all(ids) and len(set(ids)) == len(ids),
        f"ids {ids} are missing or not unique",
    )
    assistant = {
        "role": "assistant",
        "content": first["content"] or "",
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in first["calls"]
        ],
    }
    results = probe.follow_up["tool_results"]
    tool_messages = [
        {
            "role": "tool",
            "tool_call_id": c["id"],
            "name": c["name"],
            "content": results.get(c["name"], "{}"),
        }
        for c in first["calls"]
    ]
    messages = [*probe.messages, assistant, *tool_messages]
    try:
        second = _ask_whole(client, engine, probe, messages)
    except Exception as error:  # noqa: BLE001
        check(
            "id-round-trip",
            False,
            f"the turn carrying ids {ids} was refused: "
            f"{type(error).__name__}: {_scrub(str(error))}",
        )
        check.done()
        return
    # only a format whose model reads ids back (K2's) renders them into the next prompt
    rendered = _render(engine, messages, probe.tools) if FORMATS[probe.format].call_id else None
    if rendered is not None:
        missing = [i for i in ids if i not in rendered]
        check(
            "id-round-trip",
            not missing,
            f"ids {missing} do not reach the rendered prompt of the next turn",
        )
    reused = [c["id"] for c in second["calls"] if c["id"] in ids]
    check(
        "id-round-trip",
        not reused,
        f"the next turn's calls reuse ids {reused} of the turn before: a client cannot tell "
        "their results apart",
    )
    _check_trigger(check, probe.follow_up["expect"], second["calls"], summary)
    _check_calls(check, probe, second, None)
    check.done()


def test_summary_thresholds(pytestconfig, summary):
    """Last: the release gate on K2-Vendor-Verifier's numbers."""
    accuracy, agreement, f1 = summary.schema_accuracy, summary.trigger_agreement, summary.trigger_f1
    min_accuracy = pytestconfig.getoption("k2_min_schema_accuracy")
    min_agreement = pytestconfig.getoption("k2_min_trigger_agreement")
    min_f1 = pytestconfig.getoption("k2_min_trigger_f1")
    problems = []
    # No threshold passes on zero observations.
    if accuracy is None:
        problems.append("schema accuracy has no observations (no tool call came back)")
    elif accuracy < min_accuracy:
        problems.append(
            f"schema accuracy {accuracy:.3f} < {min_accuracy} "
            f"({summary.schema_valid}/{summary.calls})"
        )
    if agreement is None:
        problems.append("trigger decisions have no observations (no probe was answered)")
    elif agreement < min_agreement:
        problems.append(
            f"trigger agreement {agreement:.3f} < {min_agreement} "
            f"({summary.trigger_agree}/{summary.trigger_total})"
        )
    if f1 is not None and f1 < min_f1:
        problems.append(
            f"trigger f1 {f1:.3f} < {min_f1} (tp {summary.trigger_tp}, fp {summary.trigger_fp}, "
            f"fn {summary.trigger_fn})"
        )
    if problems:
        pytest.fail("[k2 check summary] " + "; ".join(problems), pytrace=False)
