"""Standalone reproduction scripts for ``k2conform report-finding``, one template per parser.

A script imports only the parser's own package (and the standard library): it is meant to
be pasted into a bug report for the parser's maintainers.  Every script has the same
shape: the case's data (tools, settings, the deltas as delivered), a ``run()`` that drives
the parser the way its server does (the same steps as the k2conform adapter) and returns
``{"content", "reasoning", "tool_calls": [{"id", "name", "arguments"}]}``, then a shared
epilogue that compares with the expected message, prints both, and exits 1 when the
parser's result differs from the expectation (the bug reproduces), 0 when it does not.
Its last stdout line is the observed result as JSON (``{"crash": "..."}`` when the parser
raised), which ``report-finding`` reads back to confirm the reproduction.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, Sequence

from k2conform import markers
from k2conform.model import Delta, Request

PROLOGUE = '''\
#!/usr/bin/env python3
"""Reproduction: {title}

{about}
Run it where {package} is installed: python {filename}
Exit status 1: the parser's result differs from the expected one (the bug reproduces).
"""
import json
import sys
import traceback

TOOLS = {tools}
TOOL_CHOICE = {tool_choice}
THINKING = {thinking}
MODE = {mode!r}  # "whole": the complete output at once; otherwise the deltas below, in order
# Each delta: [text, token ids] (token ids are empty for text-level deliveries).
DELTAS = {deltas}
TEXT = "".join(text for text, _ in DELTAS)
# What each token id above decodes to (Kimi K2's tokenizer), for parsers that decode ids.
TOKEN_TEXT = {token_text}
EXPECTED = {expected}
'''

EPILOGUE = '''

def assemble(events):
    """Streamed delta messages reassembled as an OpenAI client does."""
    content, reasoning, calls = [], [], {}
    for event in events:
        if event.get("content") is not None:
            content.append(event["content"])
        if event.get("reasoning") is not None:
            reasoning.append(event["reasoning"])
        for delta in event.get("tool_calls") or ():
            call = calls.setdefault(delta["index"], {"id": None, "name": None, "arguments": ""})
            if delta.get("id") and call["id"] is None:
                call["id"] = delta["id"]
            if delta.get("name") and call["name"] is None:
                call["name"] = delta["name"]
            call["arguments"] += delta.get("arguments") or ""
    return {"content": "".join(content) if content else None,
            "reasoning": "".join(reasoning) if reasoning else None,
            "tool_calls": [calls[i] for i in sorted(calls)]}


def same_arguments(a, b):
    try:
        return json.loads(a) == json.loads(b)
    except (TypeError, ValueError):
        return a == b


def differences(expected, observed):
    found = []
    if (expected["content"] or None) != (observed["content"] or None):
        found.append(("content", expected["content"], observed["content"]))
    if (expected["reasoning"] or None) != (observed["reasoning"] or None):
        found.append(("reasoning", expected["reasoning"], observed["reasoning"]))
    if len(expected["tool_calls"]) != len(observed["tool_calls"]):
        found.append(("count", len(expected["tool_calls"]), len(observed["tool_calls"])))
    for i, (want, got) in enumerate(zip(expected["tool_calls"], observed["tool_calls"])):
        if want["name"] != got["name"]:
            found.append((f"tool_calls[{i}].name", want["name"], got["name"]))
        if not same_arguments(want["arguments"], got["arguments"]):
            found.append((f"tool_calls[{i}].arguments", want["arguments"], got["arguments"]))
        if want.get("id") is not None and want["id"] != got["id"]:
            found.append((f"tool_calls[{i}].id", want["id"], got["id"]))
    return found


if __name__ == "__main__":
    try:
        observed = run()
    except Exception as exc:  # the parser raised
        traceback.print_exc()
        print("REPRODUCED: the parser raised")
        print(json.dumps({"crash": f"{type(exc).__name__}: {exc}"}, ensure_ascii=False))
        sys.exit(1)
    found = differences(EXPECTED, observed)
    print("expected:", json.dumps(EXPECTED, ensure_ascii=False))
    print("observed:", json.dumps(observed, ensure_ascii=False))
    for field, want, got in found:
        print(f"  {field}: expected {want!r}, got {got!r}")
    print("REPRODUCED" if found else "NOT REPRODUCED: the result is the expected one")
    print(json.dumps(observed, ensure_ascii=False))
    sys.exit(1 if found else 0)
'''


def render(body: str, *, package: str, title: str, about: str, request: Request,
           deltas: Sequence[Delta], mode: str, expected: dict[str, Any] | None,
           filename: str = "repro.py") -> str:
    """A complete script: the prologue with the case's data, ``body`` (defines ``run()``)
    and the shared epilogue."""
    expected = expected or {"content": None, "reasoning": None, "tool_calls": []}
    prologue = PROLOGUE.format(
        title=title, about=about, package=package, filename=filename,
        tools=_literal([dict(t) for t in request.tools]),
        tool_choice=_literal(request.tool_choice), thinking=repr(bool(request.thinking)), mode=mode,
        deltas=_literal([[d.text, list(d.token_ids)] for d in deltas]),
        expected=_literal(expected), token_text=repr(_token_texts(deltas)),
    )
    return prologue + "\n" + textwrap.dedent(body).strip("\n") + "\n" + EPILOGUE


def _token_texts(deltas: Sequence[Delta]) -> dict[int, str]:
    ids = sorted({i for d in deltas for i in d.token_ids})
    if not ids:
        return {}
    from k2conform.delivery.tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    return {i: tokenizer.decode([i]) for i in ids}


def _literal(value: Any) -> str:
    """A Python literal for JSON-able data (true/false/null spelled the Python way)."""
    return repr(json.loads(json.dumps(value)))


#: Kimi K2's special tokens, for parsers that look markers up in the tokenizer's vocabulary.
_VOCAB = repr(dict(markers.SPECIAL_TOKEN_IDS))

VLLM = '''
import types

from vllm.entrypoints.openai.chat_completion import message_assembly, protocol, stream_processor
from vllm.parser.parser_manager import ParserManager

MODEL = "moonshotai/Kimi-K2-Instruct"
PROMPT_TOKEN_IDS = [163588, 163601]  # <|im_assistant|>, <|im_middle|>: the generation prompt's tail


class KimiVocabulary:
    """The part of the Kimi K2 tokenizer the parsers read: the special tokens' ids."""

    VOCAB = %s

    def get_vocab(self):
        return dict(self.VOCAB)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.VOCAB.get(tokens)
        return [self.VOCAB.get(t) for t in tokens]

    def decode(self, ids, **kwargs):
        return "".join(TOKEN_TEXT[i] for i in ids)


def run():
    tokenizer = KimiVocabulary()
    # As `vllm serve --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]` composes it.
    cls = ParserManager.get_parser(
        tool_parser_name="kimi_k2", reasoning_parser_name="kimi_k2" if THINKING else None,
        enable_auto_tools=True, model_name=MODEL, is_harmony=False, tokenizer=tokenizer)
    model_config = types.SimpleNamespace(
        model=MODEL, hf_config=types.SimpleNamespace(model_type="kimi_k2"),
        hf_text_config=types.SimpleNamespace(model_type="kimi_k2"), hf_overrides={})
    request = protocol.ChatCompletionRequest(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=TOOLS or None,
        tool_choice=TOOL_CHOICE if TOOLS else None, chat_template_kwargs={"thinking": THINKING})

    def new_parser():
        return cls(tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs,
                   model_config=model_config)

    request = new_parser().adjust_request(request)
    if MODE == "whole":
        parser = new_parser()
        parser.set_prompt_token_ids(PROMPT_TOKEN_IDS)
        ids = [i for _, token_ids in DELTAS for i in token_ids]
        reasoning, content, calls = parser.parse(TEXT, request, enable_auto_tools=True,
                                                 model_output_token_ids=ids)
        fields = message_assembly.assemble_chat_message_fields(
            request, reasoning, content, calls, enable_auto_tools=True, parser_cls=cls)
        return {"content": fields.content, "reasoning": fields.reasoning,
                "tool_calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                               for c in fields.tool_calls]}
    processor = stream_processor.ChatStreamProcessor(request, new_parser(), enable_auto_tools=True,
                                                     parser_cls=cls)
    events = []
    for n, (text, token_ids) in enumerate(DELTAS):
        finish_reason = "stop" if n == len(DELTAS) - 1 else None
        message = processor.step(text, list(token_ids), finish_reason, PROMPT_TOKEN_IDS).delta
        if message is None:
            continue
        events.append({"content": message.content, "reasoning": message.reasoning, "tool_calls": [
            {"index": tc.index, "id": tc.id, "name": tc.function.name if tc.function else None,
             "arguments": tc.function.arguments if tc.function else None}
            for tc in (message.tool_calls or ())]})
    return assemble(events)
''' % _VOCAB

SGLANG = '''
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser


def run():
    # As serving_chat.py does with --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2].
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K2-Instruct", messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS or None, tool_choice=TOOL_CHOICE if TOOLS else "none",
        chat_template_kwargs={"thinking": THINKING})
    active = bool(request.tools) and request.tool_choice != "none"

    def call_id(name, index):  # serving_chat._process_tool_call_id for kimi_k2
        return f"functions.{name}:{index}"

    if MODE == "whole":
        text, reasoning = TEXT, None
        if THINKING and request.separate_reasoning:
            parser = ReasoningParser(model_type="kimi_k2", stream_reasoning=False, force_reasoning=True,
                                     request=request, tool_call_parser_active=active)
            reasoning, text = parser.parse_non_stream(text)
        calls = []
        if active:
            parser = FunctionCallParser(request.tools, "kimi_k2", tool_choice=request.tool_choice)
            if parser.has_tool_call(text):
                text, items = parser.parse_non_stream(text)
                calls = [{"id": call_id(i.name, i.tool_index), "name": i.name, "arguments": i.parameters}
                         for i in items]
        return {"content": text or "", "reasoning": reasoning or None, "tool_calls": calls}
    reasoning_parser = None
    if THINKING and request.separate_reasoning:
        reasoning_parser = ReasoningParser(model_type="kimi_k2", stream_reasoning=request.stream_reasoning,
                                           force_reasoning=True, request=request,
                                           tool_call_parser_active=active)
    tool_parser = FunctionCallParser(request.tools, "kimi_k2", tool_choice=request.tool_choice) if active else None
    events = []
    for n, (text, _ids) in enumerate(DELTAS):
        finished = n == len(DELTAS) - 1
        if reasoning_parser is not None:
            reasoning, text = reasoning_parser.parse_stream_chunk(text)
            if finished:
                end_reasoning, end_text = reasoning_parser.parse_stream_end()
                reasoning = (reasoning or "") + (end_reasoning or "")
                text = (text or "") + (end_text or "")
            if reasoning:
                events.append({"reasoning": reasoning})
        if tool_parser is None:
            if text:
                events.append({"content": text})
            continue
        normal, items = tool_parser.parse_stream_chunk(text)
        if finished:
            end_text, end_items = tool_parser.parse_stream_end()
            normal, items = (normal or "") + end_text, list(items) + list(end_items)
        if normal:
            events.append({"content": normal})
        for i in items:
            events.append({"tool_calls": [{"index": i.tool_index, "name": i.name or None,
                                           "id": call_id(i.name, i.tool_index) if i.name else None,
                                           "arguments": i.parameters}]})
    return assemble(events)
'''

LMDEPLOY = '''
from lmdeploy.serve.openai.protocol import ChatCompletionRequest
from lmdeploy.serve.parsers import ResponseParserManager


class KimiVocabulary:
    VOCAB = %s

    def get_vocab(self):
        return dict(self.VOCAB)


def run():
    # As `lmdeploy serve api_server --tool-call-parser kimi_k2 [--reasoning-parser default]`.
    cls = ResponseParserManager.get("default")
    cls.set_parsers(reasoning_parser_name="default" if THINKING else None, tool_parser_name="kimi_k2",
                    tokenizer=KimiVocabulary())
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K2-Instruct", messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS or None, tool_choice=TOOL_CHOICE if TOOLS else "none",
        chat_template_kwargs={"thinking": THINKING})
    parser = cls(request)
    if MODE == "whole":
        ids = [i for _, token_ids in DELTAS for i in token_ids]
        content, calls, reasoning = parser.parse_complete(TEXT, ids)
        return {"content": content, "reasoning": reasoning, "tool_calls": [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in calls or ()]}
    events = []
    for n, (text, token_ids) in enumerate(DELTAS):
        for message, _ in parser.stream_chunk(text, list(token_ids), final=n == len(DELTAS) - 1):
            events.append({"content": message.content or None,
                           "reasoning": getattr(message, "reasoning_content", None), "tool_calls": [
                {"index": tc.index, "id": tc.id, "name": tc.function.name if tc.function else None,
                 "arguments": tc.function.arguments if tc.function else None}
                for tc in message.tool_calls or ()]})
    return assemble(events)
''' % _VOCAB

APHRODITE = '''
import importlib.util
import pathlib

# The Rust extension of aphrodite-engine, loaded by file path (aphrodite/__init__ needs torch).
_spec = importlib.util.find_spec("aphrodite")
_path = pathlib.Path(next(iter(_spec.submodule_search_locations))) / "_rust_tool_parser.abi3.so"
_loader = importlib.util.spec_from_file_location("aphrodite._rust_tool_parser", _path)
rust = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(rust)


def new_parser():
    tools = [rust.Tool(t["function"]["name"], t["function"].get("description"),
                       t["function"].get("parameters") or {}, t["function"].get("strict")) for t in TOOLS]
    return rust.ToolParser("KimiK2ToolParser", tools)


def run():
    # As aphrodite's RustToolParser bridge drives a Rust parser.
    if MODE == "whole":
        if "<|tool_calls_section_begin|>" not in TEXT:
            return {"content": TEXT, "reasoning": None, "tool_calls": []}
        parser, out = new_parser(), rust.ToolParserOutput()
        parser.parse_into(TEXT, out)
        ids = {c.tool_index: parser.tool_call_id(c.tool_index) for c in out.calls}
        out.append(parser.finish())
        parsed = out.coalesce()
        calls = [{"id": ids.get(c.tool_index), "name": c.name, "arguments": c.arguments or "{}"}
                 for c in parsed.calls if c.name is not None]
        if not calls:
            return {"content": TEXT, "reasoning": None, "tool_calls": []}
        return {"content": parsed.normal_text or None, "reasoning": None, "tool_calls": calls}
    parser, events = new_parser(), []
    for text, _ids in DELTAS:  # the bridge never calls finish() on a stream
        out = rust.ToolParserOutput()
        parser.parse_into(text, out)
        events.append({"content": out.normal_text or None, "tool_calls": [
            {"index": c.tool_index, "name": c.name, "arguments": c.arguments,
             "id": parser.tool_call_id(c.tool_index) if c.name is not None else None}
            for c in out.calls if c.name is not None or c.arguments is not None]})
    return assemble(events)
'''

MLX_LM = '''
import importlib.util
import json as _json
import pathlib

# mlx_lm/tool_parsers/kimi_k2.py by file path (mlx_lm/__init__ imports mlx).
_spec = importlib.util.find_spec("mlx_lm")
_path = pathlib.Path(next(iter(_spec.submodule_search_locations))) / "tool_parsers" / "kimi_k2.py"
_loader = importlib.util.spec_from_file_location("kimi_k2", _path)
kimi_k2 = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(kimi_k2)


def run():
    # mlx_lm.server cuts the text between tool_call_start and tool_call_end (and <think>...</think>
    # into reasoning) and calls parse_tool_call on each section, dropping ValueErrors.
    text, reasoning = TEXT, None
    if THINKING and "</think>" in text:
        reasoning, text = text.split("</think>", 1)
    content, sections = "", []
    while kimi_k2.tool_call_start in text:
        before, text = text.split(kimi_k2.tool_call_start, 1)
        content += before
        section, _, text = text.partition(kimi_k2.tool_call_end)
        sections.append(section)
    content += text
    calls = []
    for section in sections:
        try:
            parsed = kimi_k2.parse_tool_call(section, TOOLS or None)
        except ValueError:
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            calls.append({"id": call.get("id"), "name": call["name"],
                          "arguments": _json.dumps(call["arguments"], ensure_ascii=False)})
    return {"content": content or None, "reasoning": reasoning or None, "tool_calls": calls}
'''


def _script(body: str, package: str, title: str, about: str):
    def make(request: Request, deltas: Sequence[Delta], mode: str, expected: dict | None = None,
             case_id: str = "case") -> str:
        return render(body, package=package, title=f"{title}: {case_id} [{mode}]", about=about,
                      request=request, deltas=deltas, mode=mode, expected=expected)
    return make


vllm_script = _script(VLLM, "vllm", "vLLM kimi_k2 tool parser",
                      "Drives vLLM's composed kimi_k2 parser as the OpenAI server does (ParserManager, "
                      "ChatStreamProcessor).")
sglang_script = _script(SGLANG, "sglang", "SGLang kimi_k2 FunctionCallParser",
                        "Drives SGLang's FunctionCallParser(tools, 'kimi_k2') (and the kimi_k2 reasoning "
                        "parser) as serving_chat.py does.")
lmdeploy_script = _script(LMDEPLOY, "lmdeploy", "lmdeploy kimi_k2 tool parser",
                          "Drives lmdeploy's default ResponseParser with the kimi_k2 tool parser as the "
                          "api_server does.")
aphrodite_script = _script(APHRODITE, "aphrodite-engine", "aphrodite Rust KimiK2ToolParser",
                           "Drives the Rust KimiK2ToolParser (aphrodite/_rust_tool_parser.abi3.so) as "
                           "aphrodite's RustToolParser bridge does.")
mlx_lm_script = _script(MLX_LM, "mlx-lm", "mlx-lm kimi_k2 parse_tool_call",
                        "Calls mlx_lm.tool_parsers.kimi_k2.parse_tool_call on the tool-call section as "
                        "mlx_lm.server cuts it out.")
