"""The deterministic edge-case generator: ``corpus/generated`` and ``docs/taxonomy.md``.

Every case belongs to one class of the edge-case taxonomy (``CLASSES``; the id's prefix
in lower case is the case's folder).  Each case is built from its own
``random.Random(seed)``, the seed derived from the base seed, the class id and the case
id (recorded in the case's ``generator`` field), so one case can be rebuilt alone and
adding a case never changes another.

The expectation of every case is the reference parser's result; for every ``y_`` case
the generator also builds the intended calls itself and refuses to write the case if
the reference disagrees, so a reference bug cannot silently become an expectation.
``n_`` and ``i_`` cases that state an intended result are checked the same way.

    python -m k2conform.case.generate            # (re)write corpus/generated and docs/taxonomy.md
    python -m k2conform.case.generate --check    # exit 1 listing missing, stale or changed files
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from k2conform import markers as mk
from k2conform.case.corpus import CompletionCase, Expectation, PromptCase, write_case
from k2conform.model import Request, ToolCall
from k2conform.reference.parser import ReferenceParser, parse
from k2conform.reference.render import render
from k2conform.resources import checkout_root

DEFAULT_SEED = 20261130

SB, SE, TB, AB, TE = mk.SECTION_BEGIN, mk.SECTION_END, mk.CALL_BEGIN, mk.ARGUMENT_BEGIN, mk.CALL_END
SB1, SE1 = mk.SECTION_BEGIN_SINGULAR, mk.SECTION_END_SINGULAR

#: Policies that fire on (nearly) every call; not worth a tag.
_ROUTINE_POLICIES = frozenset({"ID.verbatim", "ARGS.raw", "ID.standard", "THINK.off"})


class GeneratorError(AssertionError):
    """A generated case whose reference result is not what the generator intended."""


# ---------------------------------------------------------------------------------------
# Known bug classes (/work/shared/research/known_bug_classes.md): number -> title, URLs

BUGS: dict[int, tuple[str, tuple[str, ...]]] = {
    1: ("Hyphen in the name not matched", ("https://github.com/vllm-project/vllm/pull/22149", "https://github.com/ai-dynamo/dynamo/pull/8532", "https://github.com/smg-project/smg/pull/1430")),
    2: ("Dotted names cut down to the last segment", ("https://github.com/vllm-project/vllm/pull/44135",)),
    3: ("Client-style or foreign ids (call_..., toolu_..., UUIDs)", ("https://hf-mirror.492719920.workers.dev/moonshotai/Kimi-K2-Instruct/discussions/48", "https://github.com/vllm-project/vllm/pull/32146")),
    4: ("Prefixed counter ids callNNNNN", ("https://github.com/sgl-project/sglang/issues/25358", "https://github.com/sgl-project/sglang/pull/25362")),
    5: ("Mangled ids (functionsexec5, functions_read_file_3)", ("https://github.com/sgl-project/sglang/pull/21377", "https://github.com/exo-explore/exo/pull/2282")),
    6: ("Bare counter id", ("https://github.com/sgl-project/sglang/issues/23363",)),
    7: ("Id with no :idx or a malformed suffix", ("https://github.com/unslothai/unsloth/pull/5624",)),
    8: ("Model :N counter leaking into the OpenAI index / id", ("https://github.com/sgl-project/sglang/pull/20414", "https://github.com/sgl-project/sglang/pull/25071")),
    9: ("Greedy .+ merges concatenated calls", ("https://github.com/vllm-project/vllm/issues/24478", "https://github.com/vllm-project/vllm/pull/24847", "https://github.com/vllm-project/vllm/pull/32504")),
    10: ("Newline inside the header", ("https://github.com/vllm-project/vllm/pull/38443", "https://github.com/vllm-project/vllm/pull/38579")),
    11: ("Multi-line / pretty-printed JSON args not matched", ("https://github.com/smg-project/smg/pull/1636",)),
    12: ("Whitespace around args kept in streamed deltas", ("https://github.com/vllm-project/vllm/pull/44135",)),
    13: ("Singular section markers", ("https://github.com/ggml-org/llama.cpp/pull/17376",)),
    14: ("Lazy match plus a missing per-call end marker", ("https://github.com/ai-dynamo/dynamo/pull/8208",)),
    15: ("Missing section end (max_tokens)", ("https://github.com/ai-dynamo/dynamo/pull/8208",)),
    16: ("Several sections in one response / text between", ("https://github.com/sgl-project/sglang/pull/25071",)),
    17: ("Noise between section begin and call begin leaks", ("https://github.com/vllm-project/vllm/pull/28543", "https://github.com/MoonshotAI/Kimi-K2/issues/89")),
    18: ("Markers and args leak into content on section exit", ("https://github.com/vllm-project/vllm/pull/31207",)),
    19: ("Hard 8 KB section cap", ("https://github.com/vllm-project/vllm/issues/34442", "https://github.com/vllm-project/vllm/pull/37379", "https://github.com/vllm-project/vllm/pull/37384")),
    20: ("Speculative decoding puts TE and TB in one delta", ("https://github.com/vllm-project/vllm/pull/38274", "https://github.com/vllm-project/vllm/pull/38579")),
    21: ("Content lost around the section", ("https://github.com/vllm-project/vllm/issues/41182", "https://github.com/sgl-project/sglang/pull/25071", "https://github.com/sgl-project/sglang/issues/8613")),
    22: ("Markers split at text level; marker prefix inside a JSON string", ("https://github.com/sgl-project/sglang/pull/25071",)),
    23: ("Streaming drops or hangs on long args", ("https://github.com/sgl-project/sglang/issues/23363", "https://github.com/vllm-project/vllm/issues/54701")),
    24: ("Streaming and non-streaming give different argument values", ("https://github.com/vllm-project/vllm/pull/49318",)),
    25: ("Malformed JSON args: explicit disagreements", ("https://github.com/vllm-project/vllm/issues/41739", "https://github.com/vllm-project/vllm/pull/43280")),
    26: ("Args emitted as a JSON string (double-encoded)", ("https://github.com/MoonshotAI/Kimi-K2/issues/26", "https://github.com/MoonshotAI/kimi-cli/issues/2406")),
    27: ("Tool calls inside `<think>` with no `</think>`", ("https://github.com/vybestack/llxprt-code/issues/749", "https://github.com/ai-dynamo/dynamo/pull/8532", "https://github.com/ikawrakow/ik_llama.cpp/pull/958")),
    28: ("skip_special_tokens=True removes the markers", ("https://github.com/ai-dynamo/dynamo/pull/9227",)),
    29: ("Crash when a partial parse finds fewer calls", ("https://github.com/ikawrakow/ik_llama.cpp/issues/1019", "https://github.com/ikawrakow/ik_llama.cpp/issues/955", "https://github.com/ggml-org/llama.cpp/pull/17376")),
    30: ("Text after the section end: cross-implementation divergence", ("https://github.com/ai-dynamo/dynamo/pull/9594",)),
    31: ("Round-trip id fidelity", ("https://github.com/vllm-project/vllm/issues/50768", "https://github.com/vllm-project/vllm/pull/46344", "https://github.com/vybestack/llxprt-code/issues/713")),
    32: ("vLLM blog root causes (generation prompt, empty content, non-standard ids)", ("https://vllm-project-github-889pvi2hc-simon-mos-projects.vercel.app/2025/10/28/Kimi-K2-Accuracy.html", "https://github.com/vllm-project/vllm-project.github.io/pull/110/files")),
    33: ('"strict": true / EBNF for constrained decoding', ("https://github.com/sgl-project/sglang/pull/8088",)),
}

#: How far a parser can reach each bug class, where it cannot reach it fully.
BUG_NOTES: dict[int, str] = {
    8: "Parser side: the id stays verbatim and the OpenAI index is the call's position; the index itself is checked by the harness's stream comparison.",
    23: "Hangs under concurrency are a serving-pipeline bug; the parser-side part is long arguments streamed in many deltas.",
    24: "Schema type coercion happens after parsing; the parser-side part is that arguments are passed through raw, never coerced, in both paths.",
    28: "Outside a parser's reach (the serving pipeline strips the markers); the case shows what a parser is handed then: plain text, no call.",
    29: "A crash in an incremental partial parser; the cases hand a parser the triggering malformed header, whole and per character.",
    31: "A renderer/serving concern: the prompt cases check ids are rendered verbatim; the completion cases show the foreign ids the model then writes.",
    32: "(a) and (b) are renderer concerns (prompt cases); (c) is the parser-side symptom (foreign ids).",
    33: "Constrained decoding is outside a parser's reach; the cases check a `strict` tool definition is rendered verbatim and does not disturb parsing.",
}


# ---------------------------------------------------------------------------------------
# The taxonomy: class id -> (definition, why it matters, known bug classes)

@dataclass(frozen=True)
class TaxonomyClass:
    id: str
    definition: str
    why: str
    bugs: tuple[int, ...] = ()


_CLASS_LIST = [
    # Ids and names
    TaxonomyClass("ID.dotted-name", "The function name contains dots (`api.tools.search`, `my.namespace.do_thing`).", "Old vLLM kept only the last dot segment; SGLang keeps the whole name: the implementations disagree.", (2,)),
    TaxonomyClass("ID.hyphenated-name", "The function name contains hyphens (`gtasks_list-tasklists`).", "`[\\w.]+:\\d+` id regexes do not match a hyphen, so the call is dropped.", (1,)),
    TaxonomyClass("ID.non-ascii-name", "The function name has non-ASCII letters (`天气查询`, `météo`).", "`\\w` differs between regex engines (Python vs Rust vs ASCII-only classes); names are split across tokens.", (1,)),
    TaxonomyClass("ID.long-name", "A declared function name of 64 to 1024 characters.", "Fixed-size header buffers and held-back tails in streaming parsers.", (1,)),
    TaxonomyClass("ID.colon-in-name", "The function name contains colons (`mcp:github:list_prs`); only the last `:IDX` is the index.", "Parsers that split on the first colon cut the name.", (7,)),
    TaxonomyClass("ID.bare-counter", "The id is a bare counter (`0`, `3`): the name must be inferred from the arguments.", "Strict parsers drop the call; inferring parsers must refuse to guess when two tools fit.", (6,)),
    TaxonomyClass("ID.call-prefix", "OpenAI-style client ids (`call_59adf...`, `call_3`, `call00003`) echoed from a rewritten history.", "Strict parsers drop the call and return finish_reason=stop.", (3, 4, 31, 32)),
    TaxonomyClass("ID.toolu-prefix", "Anthropic-style `toolu_...` ids and UUIDs.", "Same as client ids: the name carrier is gone.", (3, 31)),
    TaxonomyClass("ID.missing-index", "An id with no `:IDX` suffix (`functions.web_search`) or an empty one (`functions.get_weather:`).", "Some parsers reject the call, some heal it.", (7,)),
    TaxonomyClass("ID.non-numeric-index", "An id whose suffix is not a number (`:abc`, `.0`, `:-1`, `:1.5`).", "Some parsers reject the call, some heal it, some read a wrong name.", (7,)),
    TaxonomyClass("ID.index-not-from-zero", "Well-formed ids whose indexes do not start at 0 or do not count up.", "The model's `:N` leaked into the OpenAI index and the streaming and non-streaming paths disagreed.", (8,)),
    TaxonomyClass("ID.repeated-index", "Two calls of one turn with the same `:IDX`.", "Parsers that key calls by the model's index merge or drop one of them.", (8,)),
    TaxonomyClass("ID.mangled", "Ids with the `.` and `:` missing or sanitised (`functionsexec5`, `functions_read_file_3`, `functions<read`).", "Unparsed ids send raw markers back as content; partial parsers crash on them.", (5, 29)),
    TaxonomyClass("ID.undeclared-name", "A well-formed id naming a tool the request does not declare (or a request with no tools).", "Whether the parser or the caller rejects it differs.", (3,)),
    # Parallel calls
    TaxonomyClass("PAR.same-function", "2 to 16 calls of one function in one section, back to back.", "Greedy id regexes merge concatenated calls; index bookkeeping in streaming.", (9,)),
    TaxonomyClass("PAR.different-functions", "2 to 16 calls of different functions in one section, back to back.", "Greedy id regexes merge concatenated calls and mismatch args.", (9,)),
    # Argument payloads
    TaxonomyClass("JSON.truncated", "Arguments cut off mid-JSON (mid-string, mid-key, mid-number, mid-escape...) before the call end.", "Implementations disagree: keep raw, skip the call, or drop truncated JSON only.", (25, 15)),
    TaxonomyClass("JSON.trailing-comma", "Arguments with a trailing comma in an object or array.", "Malformed JSON args: kept raw, skipped or repaired, depending on the parser.", (25,)),
    TaxonomyClass("JSON.single-quotes", "Arguments written with single quotes (Python-literal style).", "Malformed JSON args.", (25,)),
    TaxonomyClass("JSON.raw-newline", "A raw newline or tab inside a JSON string value.", "Not JSON; DOTALL-less regexes also fail on it.", (11, 25)),
    TaxonomyClass("JSON.nan", "`NaN`, `Infinity`, `-Infinity` literals (Python json accepts them, JSON does not).", "Lenient and strict decoders disagree.", (25,)),
    TaxonomyClass("JSON.duplicate-keys", "An object with the same key twice.", "Decoders keep the first or the last; re-serialising parsers change the arguments.", (24, 25)),
    TaxonomyClass("JSON.deep-nesting", "Arguments nested 32 to 512 levels deep.", "Recursive decoders and brace counters hit limits.", (25,)),
    TaxonomyClass("JSON.huge-number", "Numbers beyond float or int64 range, or with huge exponents.", "Re-serialising parsers change the digits.", (24,)),
    TaxonomyClass("JSON.lone-surrogate", "A lone UTF-16 surrogate escape (`\\ud83d`) inside a JSON string.", "Decoders differ on unpaired surrogates; re-encoding can crash.", (25,)),
    TaxonomyClass("JSON.non-object", "Arguments that are valid JSON but not an object (array, string, number, null, boolean).", "Regexes that require `{` drop the call.", (26, 25)),
    TaxonomyClass("JSON.empty", "Empty or whitespace-only arguments, and the empty object `{}`.", "Empty args are reported as nothing, `{}`, or the call is dropped.", (25,)),
    TaxonomyClass("JSON.double-encoded", "Arguments emitted as a JSON string that holds the JSON object.", "SGLang's regex requires `{`, so tool_calls came back empty with raw markers in content.", (26,)),
    TaxonomyClass("JSON.pretty-printed", "Multi-line, indented arguments (spaces, tabs, CRLF).", "Rust regexes without `(?s)` did not match multi-line args.", (11,)),
    TaxonomyClass("JSON.escapes", "Escapes in argument strings: Windows paths, escaped quotes, `\\u` escapes, `\\/`.", "Escape handling in string tracking; the class 3 report wrote Windows paths.", (3, 22)),
    TaxonomyClass("JSON.invalid-literal", "Arguments with a misspelt literal (`fasle`) or unquoted keys.", "The explicit cross-implementation disagreement of class 25.", (25,)),
    TaxonomyClass("JSON.schema-type-mismatch", "Well-formed arguments whose value types differ from the declared schema.", "Streaming skipped schema coercion while non-streaming applied it; a parser must pass arguments through raw.", (24,)),
    # Markers inside strings
    TaxonomyClass("MARKER.in-json-string", "Each of the five markers, the singular section markers, `<|im_end|>` and the think tags inside a JSON string value or key.", "Marker text inside a string must stay literal; marker prefixes must not be swallowed.", (22,)),
    TaxonomyClass("MARKER.in-unterminated-string", "A marker swallowed by a JSON string that never closes.", "The marker was structural after all; the parser must not lose the rest of the output.", (22, 25)),
    # Whitespace
    TaxonomyClass("WS.around-marker", "Whitespace and newlines before and after every marker.", "Streamed deltas kept whitespace the non-streaming path trimmed; whitespace before the section is content.", (12, 30)),
    TaxonomyClass("WS.in-header", "Whitespace and newlines around (or inside) the id between the call and argument markers.", "A newline after the call marker made vLLM's streaming regex drop the call.", (10,)),
    # Structure
    TaxonomyClass("STRUCT.missing-call-end", "A call without its `<|tool_call_end|>`.", "A lazy match swallows the next call; a complete section is silently dropped.", (14,)),
    TaxonomyClass("STRUCT.missing-section-end", "Output truncated (max_tokens) at every kind of point of a two-call section.", "The whole section was discarded even with complete calls.", (15,)),
    TaxonomyClass("STRUCT.several-sections", "Two or three sections in one message.", "Parsers stop at the first section end.", (16,)),
    TaxonomyClass("STRUCT.text-before", "Content before the section (plain, multi-line, with `<` and marker look-alikes).", "Content before the section begin in one chunk was dropped.", (21,)),
    TaxonomyClass("STRUCT.text-between", "Text between two sections.", "SGLang surfaces it, others drop it.", (16,)),
    TaxonomyClass("STRUCT.text-after", "Text after the section end.", "A cross-implementation divergence: streamed as content, or dropped.", (30,)),
    TaxonomyClass("STRUCT.noise-in-section", "Text inside the section but outside any call.", "It leaked into content or reasoning and broke agents on marker text.", (17,)),
    TaxonomyClass("STRUCT.singular-section-markers", "`<|tool_call_section_begin|>` / `<|tool_call_section_end|>` (begin, end or both).", "K2-Thinking emits them; parsers not recognising them return raw markers.", (13,)),
    TaxonomyClass("STRUCT.call-without-section", "Calls with no section markers around them.", "llama.cpp accepts them; the class 18 report streamed one as content.", (18, 27)),
    TaxonomyClass("STRUCT.stray-marker", "A marker where the grammar has no place for it.", "Partial parsers crash or leak it.", (29, 17)),
    TaxonomyClass("STRUCT.empty-section", "A section with no calls.", "finish_reason and empty tool_calls lists differ.", (23,)),
    # Reasoning
    TaxonomyClass("THINK.on", "Thinking on: reasoning, `</think>`, content and calls.", "Reasoning and tool parsers must hand over at `</think>`.", (27,)),
    TaxonomyClass("THINK.off", "Thinking off: `<think>` tags are ordinary content.", "A reasoning parser left on strips content.", (27, 28)),
    TaxonomyClass("THINK.unclosed-with-calls", "Tool calls inside an unclosed think block.", "The calls stayed in reasoning_content and were never executed.", (27,)),
    TaxonomyClass("THINK.unterminated", "Thinking on and no end of reasoning at all.", "The whole output is reasoning; `</think>` may have been stripped.", (27, 28)),
    # Special tokens
    TaxonomyClass("SPECIAL.im-end-in-content", "`<|im_end|>` after content, between calls, inside args or reasoning.", "`<|im_end|>` ends the turn; text after it must not be parsed.", (18, 30)),
    TaxonomyClass("SPECIAL.other-specials-in-content", "`<|im_user|>`, `<|im_middle|>`, `<|im_assistant|>`, `<|im_system|>`, `[BOS]`, `[EOS]`, media markers in content or args.", "Parsers that match `<|...|>` generically eat them.", (18,)),
    TaxonomyClass("SPECIAL.markers-stripped", "The output as a parser sees it after skip_special_tokens removed the markers.", "No calls can be found; a parser must not invent them.", (28,)),
    # UTF-8
    TaxonomyClass("UTF8.split-multibyte", "Content, reasoning and arguments with characters the tokenizer splits across tokens (🦄 龘 😀, ZWJ sequences, flags).", "Incremental detokenizers hold bytes back; parsers must not cut or duplicate characters.", (22, 23)),
    # Streaming
    TaxonomyClass("SPLIT.marker", "Recorded deltas that cut markers (`<|tool_call_` + `end|>`), put TE and TB in one delta, or the whole section in one chunk.", "Marker fragments leaked into args; speculative decoding lost the previous call's last args diff.", (20, 21, 22, 17, 18)),
    # Long payloads
    TaxonomyClass("LONG.arguments", "Arguments of tens of KB (file writes, base64 payloads).", "An 8 KB section cap dumped large args into content; streaming hung on long args.", (19, 23)),
    # Prompt side
    TaxonomyClass("RENDER.id-round-trip", "History tool-call ids (foreign or standard) rendered verbatim in the call and in `## Return of`.", "Minted or rewritten ids teach the model foreign id styles.", (31, 32)),
    TaxonomyClass("RENDER.empty-content", "An assistant turn with empty content and tool calls renders nothing before the section.", "vLLM rendered `[{'type': 'text', 'text': ''}]` before the section.", (32,)),
    TaxonomyClass("RENDER.generation-prompt", "add_generation_prompt appends `<|im_assistant|>assistant<|im_middle|>`.", "vLLM did not pass add_generation_prompt through.", (32,)),
    TaxonomyClass("RENDER.strict-tool", 'A tool definition with `"strict": true`, rendered verbatim and parsed normally.', "SGLang's strict/EBNF path did not match the Kimi wire format.", (33,)),
]
CLASSES: dict[str, TaxonomyClass] = {c.id: c for c in _CLASS_LIST}


# ---------------------------------------------------------------------------------------
# Tools and realistic payloads

def _tool(name: str, description: str, properties: dict[str, Any], required: Sequence[str] = (), strict: bool = False) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = list(required)
    function: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _s(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _i(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}


TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": _tool("get_weather", "Get weather information. Call this tool when the user needs to get weather information",
                         {"city": _s("City name"), "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    "read_file": _tool("read_file", "Read a text file from the workspace", {"path": _s("Absolute path")}, ["path"]),
    "write_file": _tool("write_file", "Write a text file, replacing it", {"file_path": _s("Absolute path"), "content": _s("Full file content")}, ["file_path", "content"]),
    "exec_shell": _tool("exec_shell", "Run a shell command and return stdout and stderr", {"command": _s("The command line"), "timeout": _i("Seconds")}, ["command"]),
    "web_search": _tool("web_search", "Search the web", {"query": _s("Search query"), "max_results": _i("How many results")}, ["query"]),
    "api.tools.search": _tool("api.tools.search", "Search the internal knowledge base", {"q": _s("Query"), "limit": _i("Max hits")}, ["q"]),
    "gtasks_list-tasklists": _tool("gtasks_list-tasklists", "List the user's Google Tasks task lists", {"maxResults": _i("Page size")}),
    "天气查询": _tool("天气查询", "查询指定城市的天气", {"城市": _s("城市名称"), "日期": _s("日期, YYYY-MM-DD")}, ["城市"]),
    "send_email": _tool("send_email", "Send an email", {"to": _s("Recipient"), "subject": _s("Subject"), "body": _s("Plain-text body")}, ["to", "subject", "body"]),
    "TodoWrite": _tool("TodoWrite", "Replace the todo list", {"todos": {"type": "array", "items": {"type": "object"}}}, ["todos"]),
    "get_news": _tool("get_news", "Get news headlines about a topic", {"content": _s("Topic")}, ["content"]),
    "ReadFile": _tool("ReadFile", "Read a file (K2-Thinking agent tool)", {"path": _s("Path")}, ["path"]),
    "edit": _tool("edit", "Replace a string in a file", {"path": _s("Path"), "old_string": _s("Text to find"), "new_string": _s("Replacement")}, ["path", "old_string", "new_string"]),
    "calculator": _tool("calculator", "Evaluate an arithmetic expression", {"expression": _s("Expression")}, ["expression"]),
    "create_event": _tool("create_event", "Create a calendar event", {"title": _s("Title"), "start": _s("ISO start"), "attendees": {"type": "array", "items": {"type": "string"}}}, ["title", "start"]),
    "list_directory": _tool("list_directory", "List a directory", {"path": _s("Directory"), "recursive": {"type": "boolean"}}, ["path"]),
    "get_coordinates": _tool("get_coordinates", "Weather by coordinates", {"latitude": {"type": "number"}, "longitude": {"type": "number"}}, ["latitude", "longitude"]),
}

CITIES = ["Beijing", "Shanghai", "Tokyo", "Paris", "London", "Delhi", "New York", "São Paulo", "Zürich", "Reykjavík", "Dallas", "Nairobi", "Seoul", "Berlin", "Lagos", "Sydney"]
PATHS = ["/srv/app/main.py", "/etc/nginx/nginx.conf", "/home/kim/notes/todo.md", "/workspace/src/lib.rs", "/tmp/report.csv", "/var/log/syslog", "/workspace/package.json", "C:\\Users\\kimi\\project\\requirements.txt"]
COMMANDS = ["ls -la", "git status --short", "pytest -q tests/", "grep -rn 'TODO' src/ | head -20", "du -sh /var/log/*", "python3 -c \"print(1+1)\"", "cat /etc/os-release", "find . -name '*.py' -newer setup.cfg"]
QUERIES = ["kimi k2 tool calling format", "latest rust release notes", "best ramen in Tokyo", "how to fix a flaky pytest", "vLLM kimi_k2 parser", "天气 北京 明天", "python json duplicate keys", "OpenAI streaming tool_calls index"]
TOPICS = ["Los Angeles today", "AI chips", "the Champions League final", "interest rates", "Mars sample return"]
EXPRESSIONS = ["2**64 - 1", "(3.5 + 4) * 12 / 7", "sqrt(2) * pi", "17 % 5 + 3"]
CONTENTS = [
    "I'll check that for you.",
    "Let me look that up.",
    "Sure — I'll run the command and report back.",
    "I need to read the file first.",
    "我来帮你查询一下。",
    "Here is my plan:\n1. Read the config.\n2. Fix the port.\n",
    "Checking the weather in both cities now.",
    "Voilà, je vérifie la météo.",
]
FILE_BODY = [
    "import sys\n", "\n", "def main(argv):\n", "    if len(argv) < 2:\n", "        print(\"usage: app <name>\")\n",
    "        return 2\n", "    print(f\"hello {argv[1]}\")\n", "    return 0\n", "\n", "if __name__ == \"__main__\":\n",
    "    sys.exit(main(sys.argv))\n",
]


def _payload(name: str, r: random.Random) -> dict[str, Any]:
    """Realistic arguments for a tool of TOOLS."""
    if name == "get_weather":
        args: dict[str, Any] = {"city": r.choice(CITIES)}
        if r.random() < 0.3:
            args["unit"] = r.choice(["celsius", "fahrenheit"])
        return args
    if name in ("read_file", "ReadFile"):
        return {"path": r.choice(PATHS)}
    if name == "write_file":
        lines = r.randint(2, 6)
        return {"file_path": r.choice(PATHS), "content": "".join(FILE_BODY[:lines])}
    if name == "exec_shell":
        args = {"command": r.choice(COMMANDS)}
        if r.random() < 0.4:
            args["timeout"] = r.choice([10, 30, 120])
        return args
    if name == "web_search":
        return {"query": r.choice(QUERIES), "max_results": r.randint(1, 10)}
    if name == "api.tools.search":
        return {"q": r.choice(QUERIES), "limit": r.randint(1, 50)}
    if name == "gtasks_list-tasklists":
        return {"maxResults": r.choice([10, 20, 100])}
    if name == "天气查询":
        return {"城市": r.choice(["北京", "上海", "深圳", "杭州", "成都"]), "日期": f"2026-0{r.randint(1, 9)}-1{r.randint(0, 9)}"}
    if name == "send_email":
        return {"to": r.choice(["ops@example.com", "kim@example.org"]), "subject": "Weekly report", "body": "Hi,\n\nthe build is green again.\n\n— K"}
    if name == "TodoWrite":
        return {"todos": [{"content": t, "status": s} for t, s in zip(["Read config", "Fix port", "Run tests"], ["completed", "in_progress", "pending"])][: r.randint(1, 3)]}
    if name == "get_news":
        return {"content": r.choice(TOPICS)}
    if name == "edit":
        return {"path": r.choice(PATHS[:5]), "old_string": "port = 8080", "new_string": f"port = {r.randint(8000, 9000)}"}
    if name == "calculator":
        return {"expression": r.choice(EXPRESSIONS)}
    if name == "create_event":
        return {"title": "Design review", "start": f"2026-12-0{r.randint(1, 9)}T1{r.randint(0, 7)}:00:00Z", "attendees": ["ana@example.com", "li@example.com"][: r.randint(1, 2)]}
    if name == "list_directory":
        return {"path": r.choice(["/workspace", "/srv/app", "/home/kim"]), "recursive": r.random() < 0.5}
    if name == "get_coordinates":
        return {"latitude": round(r.uniform(-80, 80), 4), "longitude": round(r.uniform(-170, 170), 4)}
    return {"value": r.randint(0, 99)}


def dumps(args: Any) -> str:
    """Arguments as the model writes them: ', ' and ': ' separators, non-ASCII as is."""
    return json.dumps(args, ensure_ascii=False)


def call_text(call_id: str, arguments: str) -> str:
    return f"{TB}{call_id}{AB}{arguments}{TE}"


def section(*calls: str) -> str:
    return SB + "".join(calls) + SE


def std_calls(r: random.Random, names: Sequence[str], start: int = 0) -> tuple[list[str], list[ToolCall]]:
    """Well-formed calls ``functions.NAME:IDX`` with realistic payloads: (texts, intended)."""
    texts, calls = [], []
    for i, name in enumerate(names):
        arguments = dumps(_payload(name, r))
        call_id = f"functions.{name}:{start + i}"
        texts.append(call_text(call_id, arguments))
        calls.append(ToolCall(name, arguments, call_id))
    return texts, calls


def tools_for(*names: str) -> list[dict[str, Any]]:
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return [TOOLS[n] for n in seen]


# ---------------------------------------------------------------------------------------
# The builder

def _derive(*parts: Any) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


_UNSET: Any = object()


@dataclass
class _Generator:
    base_seed: int
    cases: list[CompletionCase] = field(default_factory=list)
    prompts: list[PromptCase] = field(default_factory=list)
    bugs_of: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _class: str = ""
    _id: str = ""
    _seed: int = 0

    def start(self, class_id: str, case_id: str) -> random.Random:
        """Begin a case: its rng, seeded from the base seed, the class and the case id."""
        if class_id not in CLASSES:
            raise GeneratorError(f"{case_id}: unknown taxonomy class {class_id}")
        self._class, self._id = class_id, case_id
        self._seed = _derive(self.base_seed, class_id, case_id)
        return random.Random(self._seed)

    def emit(
        self,
        description: str,
        output: str | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        calls: Sequence[ToolCall] | None = _UNSET,
        content: str | None = None,
        reasoning: str | None = None,
        thinking: bool = False,
        deltas: Sequence[str] | None = None,
        tags: Sequence[str] = (),
        bugs: Sequence[int] = (),
        tool_choice: str = "auto",
    ) -> None:
        case_id = self._id
        if deltas is not None:
            deltas = tuple(deltas)
            output = "".join(deltas)
        assert output is not None
        request = Request(tools=tuple(tools), tool_choice=tool_choice, thinking=thinking)
        result = parse(output, request)
        observed = (result.content, result.reasoning, result.tool_calls)
        if calls is _UNSET:
            if case_id.startswith("y_"):
                raise GeneratorError(f"{case_id}: a y_ case must state its intended calls")
        else:
            intended = (content, reasoning, tuple(calls or ()))
            if observed != intended:
                raise GeneratorError(f"{case_id}: reference result {observed!r} is not the intended {intended!r}")
        if deltas is not None:
            streamed = ReferenceParser(request)
            for delta in deltas:
                streamed.feed(delta)
            streamed.finish()
            got = streamed.result()
            if (got.content, got.reasoning, got.tool_calls) != observed:
                raise GeneratorError(f"{case_id}: the recorded deltas parse differently from the whole output")
        policies = [p for p in result.meta["policies"] if p not in _ROUTINE_POLICIES]
        all_tags = list(dict.fromkeys([self._class, *tags, *policies]))
        bugs = tuple(bugs)
        self.bugs_of[case_id] = bugs
        if bugs:
            source = "; ".join(f"known bug class {n}: {BUGS[n][1][0]}" for n in bugs)
        else:
            source = f"k2conform taxonomy {self._class}"
        self.cases.append(
            CompletionCase(
                id=case_id,
                description=description,
                tags=tuple(all_tags),
                source=source,
                request=request,
                model_output=output,
                deltas=deltas,
                expected=Expectation(result.content, result.reasoning, result.tool_calls),
                generator={"class": self._class, "seed": self._seed, "base_seed": self.base_seed},
            )
        )

    def emit_prompt(self, description: str, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]],
                    add_generation_prompt: bool, must_contain: Sequence[str], bugs: Sequence[int] = (), tags: Sequence[str] = ()) -> None:
        expected = render(messages, tools, add_generation_prompt)
        for needle in must_contain:
            if needle not in expected:
                raise GeneratorError(f"{self._id}: rendered prompt lacks {needle!r}")
        self.bugs_of[self._id] = tuple(bugs)
        source = "; ".join(f"known bug class {n}: {BUGS[n][1][0]}" for n in bugs) or f"k2conform taxonomy {self._class}"
        self.prompts.append(
            PromptCase(self._id, description, tuple(dict.fromkeys([self._class, *tags])), source,
                       tuple(messages), tuple(tools), add_generation_prompt, expected)
        )


# ---------------------------------------------------------------------------------------
# ID.*

def _ids(g: _Generator) -> None:
    k = "ID.dotted-name"
    for case_id, name, extra in (
        ("y_id_dotted_name_api_tools_search", "api.tools.search", ()),
        ("y_id_dotted_name_my_namespace_do_thing", "my.namespace.do_thing", ()),
        ("y_id_dotted_name_five_segments", "org.example.mcp.files.read", ()),
        ("y_id_dotted_name_beside_plain_tools", "api.tools.search", ("web_search", "get_weather")),
    ):
        r = g.start(k, case_id)
        tools = [TOOLS.get(name) or _tool(name, "Namespaced tool", {"value": _i("A value")})] + tools_for(*extra)
        args = dumps(_payload(name, r))
        cid = f"functions.{name}:0"
        g.emit(f"Declared dotted name {name} is kept whole", section(call_text(cid, args)), tools=tools,
               calls=[ToolCall(name, args, cid)], bugs=(2,))
    r = g.start(k, "i_id_dotted_name_suffix_declared")
    args = dumps({"value": 7})
    g.emit("Dotted id whose last segment is the declared tool: the reference uses the declared suffix",
           section(call_text("functions.my.namespace.do_thing:0", args)),
           tools=[_tool("do_thing", "Do the thing", {"value": _i("A value")})], bugs=(2,))
    r = g.start(k, "i_id_dotted_name_undeclared")
    args = dumps(_payload("api.tools.search", r))
    g.emit("Dotted name that is not declared at all (only web_search is)", section(call_text("functions.api.tools.search:0", args)),
           tools=tools_for("web_search"), bugs=(2,))
    r = g.start(k, "i_id_dotted_name_no_tools")
    g.emit("Dotted name with no tools declared", section(call_text("functions.my.namespace.do_thing:0", "{}")), bugs=(2,))

    k = "ID.hyphenated-name"
    for case_id, name in (
        ("y_id_hyphenated_name_gtasks", "gtasks_list-tasklists"),
        ("y_id_hyphenated_name_list_files", "list-files"),
        ("y_id_hyphenated_name_many_hyphens", "get-current-user-profile-v2"),
        ("y_id_hyphenated_name_dotted_and_hyphen", "mcp.git-hub.list-pull-requests"),
    ):
        r = g.start(k, case_id)
        tools = [TOOLS.get(name) or _tool(name, "Hyphenated tool", {"maxResults": _i("Page size")})]
        args = dumps(_payload(name, r)) if name in TOOLS else dumps({"maxResults": r.choice([5, 10, 50])})
        cid = f"functions.{name}:0"
        g.emit(f"Hyphenated name {name}", section(call_text(cid, args)), tools=tools, calls=[ToolCall(name, args, cid)], bugs=(1,))
    r = g.start(k, "y_id_hyphenated_name_class1_raw")
    g.emit("The class 1 raw example: gtasks_list-tasklists with empty-object args",
           section(call_text("functions.gtasks_list-tasklists:0", "{}")), tools=tools_for("gtasks_list-tasklists"),
           calls=[ToolCall("gtasks_list-tasklists", "{}", "functions.gtasks_list-tasklists:0")], bugs=(1,))

    k = "ID.non-ascii-name"
    for case_id, name, key, value in (
        ("y_id_non_ascii_name_chinese", "天气查询", "城市", "北京"),
        ("y_id_non_ascii_name_french", "météo_actuelle", "ville", "Montréal"),
        ("y_id_non_ascii_name_cyrillic", "поиск_файлов", "запрос", "отчёт 2026"),
        ("y_id_non_ascii_name_japanese_dotted", "ツール.検索", "クエリ", "東京 天気"),
        ("y_id_non_ascii_name_greek", "υπολογισμός", "έκφραση", "π * 2"),
    ):
        r = g.start(k, case_id)
        tools = [TOOLS.get(name) or _tool(name, "Non-ASCII tool", {key: _s(key)}, [key])]
        args = dumps(_payload(name, r)) if name in TOOLS else dumps({key: value})
        cid = f"functions.{name}:0"
        g.emit(f"Non-ASCII name {name}", section(call_text(cid, args)), tools=tools, calls=[ToolCall(name, args, cid)], bugs=(1,))

    k = "ID.long-name"
    for length in (64, 256, 1024):
        r = g.start(k, f"y_id_long_name_{length}_chars")
        stem = "fetch_customer_orders_by_region_and_quarter_"
        name = (stem * (length // len(stem) + 1))[: length - 1] + "x"
        tools = [_tool(name, "A tool with a very long name", {"region": _s("Region")}, ["region"])]
        args = dumps({"region": r.choice(["EMEA", "APAC", "LATAM"])})
        cid = f"functions.{name}:0"
        g.emit(f"Declared name of {length} characters", section(call_text(cid, args)), tools=tools, calls=[ToolCall(name, args, cid)])

    k = "ID.colon-in-name"
    for case_id, name in (("i_id_colon_in_name_mcp_server_tool", "mcp:github:list_prs"), ("i_id_colon_in_name_one_colon", "files:read")):
        r = g.start(k, case_id)
        g.emit(f"Name with colons {name}: only the last :IDX is the index", section(call_text(f"functions.{name}:0", dumps({"repo": "moonshot/kimi"}))),
               tools=[_tool(name, "MCP-style tool", {"repo": _s("Repository")}, ["repo"])], bugs=(7,))
    r = g.start(k, "i_id_colon_in_name_undeclared")
    g.emit("Colon name not declared: kept whole as written", section(call_text("functions.ns:tool:3", dumps({"repo": "a/b"}))),
           tools=tools_for("web_search"), bugs=(7,))

    k = "ID.bare-counter"
    r = g.start(k, "i_id_bare_counter_unique_schema")
    args = dumps({"city": "Tokyo"})
    g.emit("Bare counter id 0; exactly one declared tool accepts the arguments (name inferred)",
           section(call_text("0", args)), tools=tools_for("get_weather", "read_file", "web_search"),
           calls=[ToolCall("get_weather", args, "0")], bugs=(6,))
    r = g.start(k, "i_id_bare_counter_ambiguous")
    g.emit("Bare counter id 0; two declared tools accept the arguments, so nothing is guessed",
           section(call_text("0", args)),
           tools=[TOOLS["get_weather"], _tool("get_forecast", "Forecast", {"city": _s("City")}, ["city"])],
           calls=[ToolCall("0", args, "0")], bugs=(6,))
    r = g.start(k, "i_id_bare_counter_parallel")
    texts = [call_text(str(i), dumps(_payload(n, r))) for i, n in enumerate(("read_file", "exec_shell", "get_weather"))]
    g.emit("Three calls with bare counters 0, 1, 2 and distinct schemas", section(*texts),
           tools=tools_for("read_file", "exec_shell", "get_weather"), bugs=(6,))
    r = g.start(k, "i_id_bare_counter_no_schema_fits")
    g.emit("Bare counter id whose arguments fit no declared tool", section(call_text("3", dumps({"colour": "teal"}))),
           tools=tools_for("get_weather", "read_file"), bugs=(6,))

    k = "ID.call-prefix"
    r = g.start(k, "i_id_call_prefix_class3_raw")
    args = dumps({"file_path": "C:\\Users\\kimi\\project\\requirements.txt", "content": "requests==2.32.3\nflask==3.0.3\n"})
    g.emit("Class 3 raw example: a call_<hex> id after content, name inferred from the arguments",
           "Now let me create the requirements file." + section(call_text("call_59adf5614cfe4f4b8a71be54", args)),
           tools=tools_for("write_file", "read_file"), content="Now let me create the requirements file.",
           calls=[ToolCall("write_file", args, "call_59adf5614cfe4f4b8a71be54")], bugs=(3, 32))
    for case_id, cid, name, bugs in (
        ("i_id_call_prefix_short_counter", "call_3", "exec_shell", (3,)),
        ("i_id_call_prefix_call00003", "call00003", "get_weather", (4,)),
        ("i_id_call_prefix_openai_24_chars", "call_Ab3dE5fG7hI9jK1lM3nO5pQ7", "web_search", (3, 31)),
    ):
        r = g.start(k, case_id)
        a = dumps(_payload(name, r))
        g.emit(f"Foreign id {cid}; one declared tool accepts the arguments", section(call_text(cid, a)),
               tools=tools_for("get_weather", "exec_shell", "web_search"), calls=[ToolCall(name, a, cid)], bugs=bugs)
    r = g.start(k, "i_id_call_prefix_parallel_mixed_with_standard")
    a0, a1 = dumps(_payload("get_weather", r)), dumps(_payload("read_file", r))
    g.emit("A standard id and a call_ id in one section", section(call_text("functions.get_weather:0", a0), call_text("call_1", a1)),
           tools=tools_for("get_weather", "read_file"), calls=[ToolCall("get_weather", a0, "functions.get_weather:0"), ToolCall("read_file", a1, "call_1")], bugs=(3, 32))

    k = "ID.toolu-prefix"
    for case_id, cid, name in (
        ("i_id_toolu_prefix_read_file", "toolu_01A09q90qw90lq917835lq9", "read_file"),
        ("i_id_toolu_prefix_uuid", "3f2b8c1e-9d4a-4e6b-8f1a-2c7d5e9b0a14", "exec_shell"),
        ("i_id_toolu_prefix_bedrock_tooluse", "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "get_weather"),
    ):
        r = g.start(k, case_id)
        a = dumps(_payload(name, r))
        g.emit(f"Foreign id {cid}; the name is inferred from the arguments", section(call_text(cid, a)),
               tools=tools_for("read_file", "exec_shell", "get_weather"), calls=[ToolCall(name, a, cid)], bugs=(3, 31))

    k = "ID.missing-index"
    for case_id, cid, name, declared in (
        ("i_id_missing_index_web_search", "functions.web_search", "web_search", True),
        ("i_id_missing_index_empty_suffix", "functions.get_weather:", "get_weather:", False),
        ("i_id_missing_index_no_prefix", "get_weather", "get_weather", True),
    ):
        r = g.start(k, case_id)
        a = dumps(_payload(name.rstrip(":"), r))
        g.emit(f"Id {cid} has no numeric index", section(call_text(cid, a)), tools=tools_for("web_search", "get_weather"),
               calls=[ToolCall(name, a, cid)], bugs=(7,))

    k = "ID.non-numeric-index"
    for case_id, cid in (
        ("i_id_non_numeric_index_abc", "functions.get_weather:abc"),
        ("i_id_non_numeric_index_dot_zero", "functions.invalid.0"),
        ("i_id_non_numeric_index_negative", "functions.get_weather:-1"),
        ("i_id_non_numeric_index_decimal", "functions.get_weather:1.5"),
        ("i_id_non_numeric_index_hex", "functions.get_weather:0x1"),
    ):
        r = g.start(k, case_id)
        a = '{"a":1}' if "invalid" in cid else dumps(_payload("get_weather", r))
        g.emit(f"Id {cid} has a non-numeric index", section(call_text(cid, a)), tools=tools_for("get_weather"), bugs=(7,))

    k = "ID.index-not-from-zero"
    r = g.start(k, "n_id_index_not_from_zero_class8_raw")
    a = dumps({"path": "a"})
    g.emit("Class 8 raw example: functions.read:5 in the first call; the id stays verbatim, the name is read",
           section(call_text("functions.read:5", a)), tools=[_tool("read", "Read", {"path": _s("Path")}, ["path"])],
           calls=[ToolCall("read", a, "functions.read:5")], bugs=(8,))
    for case_id, indexes in (("n_id_index_not_from_zero_starts_at_1", (1, 2, 3)), ("n_id_index_not_from_zero_descending", (2, 1, 0)),
                             ("n_id_index_not_from_zero_history_offset", (10, 11))):
        r = g.start(k, case_id)
        names = ["read_file"] * len(indexes)
        texts, calls = [], []
        for n, idx in zip(names, indexes):
            a = dumps(_payload(n, r))
            texts.append(call_text(f"functions.{n}:{idx}", a))
            calls.append(ToolCall(n, a, f"functions.{n}:{idx}"))
        g.emit(f"Indexes {indexes}: ids verbatim, OpenAI index is the position", section(*texts), tools=tools_for("read_file"), calls=calls, bugs=(8,))

    k = "ID.repeated-index"
    for case_id, names in (("n_id_repeated_index_same_function", ("get_weather", "get_weather")),
                           ("n_id_repeated_index_different_functions", ("get_weather", "get_news")),
                           ("n_id_repeated_index_three_zeros", ("read_file", "exec_shell", "read_file"))):
        r = g.start(k, case_id)
        texts, calls = [], []
        for n in names:
            a = dumps(_payload(n, r))
            texts.append(call_text(f"functions.{n}:0", a))
            calls.append(ToolCall(n, a, f"functions.{n}:0"))
        g.emit(f"{len(names)} calls all with index 0: every call kept", section(*texts), tools=tools_for(*names), calls=calls, bugs=(8,))

    k = "ID.mangled"
    for case_id, cid, name, bugs in (
        ("i_id_mangled_functionsexec5", "functionsexec5", "exec_shell", (5,)),
        ("i_id_mangled_sanitised_underscores", "functions_read_file_3", "read_file", (5,)),
        ("i_id_mangled_angle_bracket", "functions<read", "read_file", (29,)),
        ("i_id_mangled_missing_dot", "functionsget_weather:0", "get_weather", (5,)),
        ("i_id_mangled_double_prefix", "functions.functions.get_weather:0", "get_weather", (5,)),
    ):
        r = g.start(k, case_id)
        a = dumps(_payload(name, r))
        g.emit(f"Mangled id {cid}", section(call_text(cid, a)), tools=tools_for("exec_shell", "read_file", "get_weather"), bugs=bugs)

    k = "ID.undeclared-name"
    r = g.start(k, "i_id_undeclared_name_standard_id")
    g.emit("Well-formed id naming a tool that is not declared", section(call_text("functions.delete_repository:0", dumps({"repo": "kimi/k2"}))),
           tools=tools_for("read_file"), bugs=(3,))
    r = g.start(k, "i_id_undeclared_name_no_tools")
    a = dumps(_payload("get_weather", r))
    g.emit("A standard call when the request declares no tools", section(call_text("functions.get_weather:0", a)), bugs=(3,))
    r = g.start(k, "i_id_undeclared_name_case_differs")
    g.emit("The id names GET_WEATHER; get_weather is declared", section(call_text("functions.GET_WEATHER:0", a)), tools=tools_for("get_weather"), bugs=(3,))


# ---------------------------------------------------------------------------------------
# PAR.*

_DIFFERENT_ORDER = ["get_weather", "read_file", "exec_shell", "web_search", "api.tools.search", "gtasks_list-tasklists", "天气查询",
                    "send_email", "TodoWrite", "get_news", "edit", "calculator", "create_event", "list_directory", "write_file", "get_coordinates"]


def _parallel(g: _Generator) -> None:
    for count in range(2, 17):
        r = g.start("PAR.same-function", f"y_par_same_function_{count}_calls")
        name = r.choice(["get_weather", "read_file", "web_search", "exec_shell"])
        texts, calls = std_calls(r, [name] * count)
        content = r.choice(CONTENTS) if count % 3 == 0 else None
        g.emit(f"{count} parallel calls of {name} back to back", (content or "") + section(*texts), tools=tools_for(name),
               calls=calls, content=content, bugs=(9,))
    for count in range(2, 17):
        r = g.start("PAR.different-functions", f"y_par_different_functions_{count}_calls")
        names = _DIFFERENT_ORDER[:count]
        r.shuffle(names)
        texts, calls = std_calls(r, names)
        g.emit(f"{count} parallel calls of {count} different functions", section(*texts), tools=tools_for(*names), calls=calls, bugs=(9,))
    r = g.start("PAR.different-functions", "y_par_different_functions_class9_raw")
    a0, a1 = '{"latitude": 34.0522, "longitude": -118.2437}', '{"content": "Los Angeles today"}'
    g.emit("Class 9 raw example: two concatenated calls, no separator", section(call_text("functions.get_weather:0", a0), call_text("functions.get_news:1", a1)),
           tools=[TOOLS["get_coordinates"] | {"function": {**TOOLS["get_coordinates"]["function"], "name": "get_weather"}}, TOOLS["get_news"]],
           calls=[ToolCall("get_weather", a0, "functions.get_weather:0"), ToolCall("get_news", a1, "functions.get_news:1")], bugs=(9,))
    r = g.start("PAR.same-function", "y_par_same_function_im_end_after_section")
    texts, calls = std_calls(r, ["get_weather"] * 2)
    g.emit("Two calls followed by <|im_end|>, as the spec shows the turn closed", section(*texts) + mk.IM_END,
           tools=tools_for("get_weather"), calls=calls, bugs=(9,))


# ---------------------------------------------------------------------------------------
# JSON.*

def _one_call(name: str, arguments: str, idx: int = 0) -> tuple[str, ToolCall]:
    cid = f"functions.{name}:{idx}"
    return section(call_text(cid, arguments)), ToolCall(name, arguments.strip(" \t\r\n"), cid)


def _json(g: _Generator) -> None:
    k = "JSON.truncated"
    full = '{"command": "grep -rn \\"TODO\\" src/", "timeout": 30, "env": {"LANG": "C.UTF-8", "PATH": "/usr/bin"}, "flags": ["-r", "-n"]}'
    for label, cut_after in (
        ("only_open_brace", "{"),
        ("mid_key", '{"comm'),
        ("after_key", '{"command"'),
        ("after_colon", '{"command":'),
        ("mid_string", '{"command": "grep -rn'),
        ("mid_escape", '{"command": "grep -rn \\'),
        ("after_comma", '{"command": "grep -rn \\"TODO\\" src/",'),
        ("mid_number", '{"command": "grep -rn \\"TODO\\" src/", "timeout": 3'),
        ("mid_nested_object", '{"command": "grep -rn \\"TODO\\" src/", "timeout": 30, "env": {"LANG": "C.UTF-8"'),
        ("mid_array", '{"command": "grep -rn \\"TODO\\" src/", "timeout": 30, "env": {"LANG": "C.UTF-8", "PATH": "/usr/bin"}, "flags": ["-r"'),
        ("missing_final_brace", full[:-1]),
    ):
        assert full.startswith(cut_after), label
        r = g.start(k, f"n_json_truncated_{label}")
        text, call = _one_call("exec_shell", cut_after)
        g.emit(f"Arguments cut off {label.replace('_', ' ')}, call and section ends present: kept raw", text,
               tools=tools_for("exec_shell"), calls=[call], bugs=(25,))
    r = g.start(k, "n_json_truncated_mid_unicode_escape")
    text, call = _one_call("get_weather", '{"city": "Z\\u00')
    g.emit("Arguments cut off inside a \\u escape: kept raw", text, tools=tools_for("get_weather"), calls=[call], bugs=(25,))
    r = g.start(k, "n_json_truncated_second_of_two_calls")
    a0 = dumps(_payload("get_weather", r))
    g.emit("The second of two calls has truncated arguments; both calls kept",
           section(call_text("functions.get_weather:0", a0), call_text("functions.get_weather:1", '{"city": "Lon')),
           tools=tools_for("get_weather"), calls=[ToolCall("get_weather", a0, "functions.get_weather:0"), ToolCall("get_weather", '{"city": "Lon', "functions.get_weather:1")], bugs=(25,))

    simple = [
        ("JSON.trailing-comma", "n_json_trailing_comma_object", '{"city": "Paris", "unit": "celsius",}', "get_weather", "Trailing comma in the object"),
        ("JSON.trailing-comma", "n_json_trailing_comma_array", '{"todos": [{"content": "a", "status": "pending"},]}', "TodoWrite", "Trailing comma in an array"),
        ("JSON.trailing-comma", "n_json_trailing_comma_nested", '{"title": "Sync", "start": "2026-12-01T10:00:00Z", "attendees": ["a@example.com", "b@example.com",],}', "create_event", "Trailing commas at two levels"),
        ("JSON.single-quotes", "n_json_single_quotes_python_dict", "{'city': 'Paris'}", "get_weather", "Python-literal arguments with single quotes"),
        ("JSON.single-quotes", "n_json_single_quotes_mixed", "{\"path\": '/etc/hosts'}", "read_file", "Double-quoted key, single-quoted value"),
        ("JSON.raw-newline", "n_json_raw_newline_in_string", '{"file_path": "/tmp/a.txt", "content": "line one\nline two\n"}', "write_file", "Raw newlines inside a string value"),
        ("JSON.raw-newline", "n_json_raw_tab_in_string", '{"command": "printf \'a\tb\'"}', "exec_shell", "A raw tab inside a string value"),
        ("JSON.raw-newline", "n_json_raw_newline_class11_value", '{\n  "a": "x\ny"\n}', "f", "Class 11 raw example read literally: a raw newline inside the value"),
        ("JSON.nan", "n_json_nan_value", '{"expression": "0/0", "result": NaN}', "calculator", "A NaN literal"),
        ("JSON.nan", "n_json_nan_infinity", '{"latitude": Infinity, "longitude": 0}', "get_coordinates", "An Infinity literal"),
        ("JSON.nan", "n_json_nan_negative_infinity", '{"latitude": -Infinity, "longitude": 12.5}', "get_coordinates", "A -Infinity literal"),
        ("JSON.non-object", "n_json_non_object_array", '["ls", "-la"]', "exec_shell", "Arguments are a JSON array"),
        ("JSON.non-object", "n_json_non_object_string", '"Paris"', "get_weather", "Arguments are a bare JSON string"),
        ("JSON.non-object", "n_json_non_object_number", "42", "calculator", "Arguments are a number"),
        ("JSON.non-object", "n_json_non_object_null", "null", "gtasks_list-tasklists", "Arguments are null"),
        ("JSON.non-object", "n_json_non_object_true", "true", "list_directory", "Arguments are true"),
        ("JSON.empty", "n_json_empty_nothing", "", "gtasks_list-tasklists", "Nothing between the argument marker and the call end"),
        ("JSON.empty", "n_json_empty_whitespace_only", " \n\t ", "gtasks_list-tasklists", "Only whitespace as arguments"),
        ("JSON.double-encoded", "n_json_double_encoded_todowrite", '"{\\"todos\\": [{\\"content\\": \\"Run tests\\", \\"status\\": \\"pending\\"}]}"', "TodoWrite", "Class 26 raw example shape: the arguments object encoded again as a JSON string"),
        ("JSON.double-encoded", "n_json_double_encoded_weather", '"{\\"city\\": \\"Beijing\\"}"', "get_weather", "Weather arguments double-encoded"),
        ("JSON.invalid-literal", "n_json_invalid_literal_class25_raw", '{"city": "Bad", "valid": fasle', "get_weather", "Class 25 raw example: misspelt literal and no closing brace"),
        ("JSON.invalid-literal", "n_json_invalid_literal_unquoted_keys", "{city: \"Paris\"}", "get_weather", "Unquoted key"),
        ("JSON.invalid-literal", "n_json_invalid_literal_comment", '{"city": "Paris" /* capital */}', "get_weather", "A comment inside the arguments"),
        ("JSON.invalid-literal", "n_json_invalid_literal_two_objects", '{"city": "Paris"}{"city": "Rome"}', "get_weather", "Two objects back to back"),
    ]
    for klass, case_id, arguments, name, description in simple:
        g.start(klass, case_id)
        text, call = _one_call(name, arguments)
        tools = tools_for(name) if name in TOOLS else [_tool(name, "Generic", {"a": _s("a")})]
        g.emit(f"{description}: kept raw", text, tools=tools, calls=[call], bugs=CLASSES[klass].bugs[:1])

    valid = [
        ("JSON.empty", "y_json_empty_object", "{}", "gtasks_list-tasklists", "The empty object"),
        ("JSON.empty", "y_json_empty_object_with_inner_space", "{ }", "gtasks_list-tasklists", "The empty object with a space inside"),
        ("JSON.huge-number", "y_json_huge_number_bigint", '{"expression": "2**100", "result": 1267650600228229401496703205376}', "calculator", "An integer far beyond int64"),
        ("JSON.huge-number", "y_json_huge_number_exponent", '{"latitude": 1e400, "longitude": -1E-400}', "get_coordinates", "Exponents beyond float range"),
        ("JSON.huge-number", "y_json_huge_number_many_digits", '{"latitude": 34.052235123456789012345678901234567890, "longitude": -0.0}', "get_coordinates", "More digits than a double holds, and -0.0"),
        ("JSON.huge-number", "y_json_huge_number_int64_edges", '{"maxResults": 9223372036854775808}', "gtasks_list-tasklists", "2**63, one past int64"),
        ("JSON.pretty-printed", "y_json_pretty_printed_indent_2", json.dumps({"todos": [{"content": "Read config", "status": "completed"}, {"content": "Fix port", "status": "pending"}]}, indent=2), "TodoWrite", "Arguments indented by 2"),
        ("JSON.pretty-printed", "y_json_pretty_printed_indent_4_nested", json.dumps({"title": "Design review", "start": "2026-12-01T10:00:00Z", "attendees": ["ana@example.com", "li@example.com"]}, indent=4), "create_event", "Arguments indented by 4"),
        ("JSON.pretty-printed", "y_json_pretty_printed_tabs", json.dumps({"path": "/srv/app/main.py", "old_string": "port = 8080", "new_string": "port = 9090"}, indent="\t"), "edit", "Arguments indented by tabs"),
        ("JSON.pretty-printed", "y_json_pretty_printed_crlf", '{\r\n  "command": "dir C:\\\\",\r\n  "timeout": 10\r\n}', "exec_shell", "CRLF line ends"),
        ("JSON.pretty-printed", "y_json_pretty_printed_class11_escaped", '{\n  "a": "x\\ny"\n}', "f", "Class 11 raw example with the inner newline escaped"),
        ("JSON.escapes", "y_json_escapes_windows_path", dumps({"file_path": "C:\\Users\\kimi\\project\\requirements.txt", "content": "requests==2.32.3\n"}), "write_file", "Windows path with escaped backslashes"),
        ("JSON.escapes", "y_json_escapes_quotes", dumps({"command": 'echo "hello \\"world\\""'}), "exec_shell", "Escaped quotes and escaped backslashes"),
        ("JSON.escapes", "y_json_escapes_unicode", '{"city": "Z\\u00fcrich", "unit": "celsius"}', "get_weather", "\\u escapes for non-ASCII letters"),
        ("JSON.escapes", "y_json_escapes_solidus_and_controls", '{"query": "a\\/b \\b\\f\\n\\r\\t end", "max_results": 3}', "web_search", "Escaped solidus and control escapes"),
        ("JSON.escapes", "y_json_escapes_backslash_before_quote_end", dumps({"path": "C:\\dir\\"}), "read_file", "A string ending in an escaped backslash"),
        ("JSON.escapes", "y_json_escapes_surrogate_pair", '{"content": "unicorn \\ud83e\\udd84"}', "get_news", "An escaped surrogate pair"),
        ("JSON.schema-type-mismatch", "y_json_schema_type_mismatch_string_for_integer", '{"command": "sleep 1", "timeout": "30"}', "exec_shell", "A string where the schema says integer: passed through raw"),
        ("JSON.schema-type-mismatch", "y_json_schema_type_mismatch_number_for_string", '{"city": 12345}', "get_weather", "A number where the schema says string: passed through raw"),
        ("JSON.schema-type-mismatch", "y_json_schema_type_mismatch_extra_key", '{"path": "/tmp/x", "encoding": "latin-1"}', "read_file", "An undeclared extra key"),
        ("JSON.schema-type-mismatch", "y_json_schema_type_mismatch_bool_as_string", '{"path": "/srv", "recursive": "true"}', "list_directory", "\"true\" as a string where the schema says boolean"),
    ]
    for klass, case_id, arguments, name, description in valid:
        g.start(klass, case_id)
        text, call = _one_call(name, arguments)
        tools = tools_for(name) if name in TOOLS else [_tool(name, "Generic", {"a": _s("a")})]
        g.emit(f"{description}: well-formed, kept byte for byte", text, tools=tools, calls=[call], bugs=CLASSES[klass].bugs[:1])

    k = "JSON.duplicate-keys"
    for case_id, arguments in (("i_json_duplicate_keys_top_level", '{"city": "Paris", "city": "Rome"}'),
                               ("i_json_duplicate_keys_nested", '{"city": "Paris", "unit": {"a": 1, "a": 2}}')):
        g.start(k, case_id)
        text, call = _one_call("get_weather", arguments)
        g.emit("Duplicate keys: valid JSON grammar, decoders disagree on the value", text, tools=tools_for("get_weather"), calls=[call], bugs=(25,))
    k = "JSON.lone-surrogate"
    for case_id, arguments in (("i_json_lone_surrogate_high", '{"content": "broken \\ud83d emoji"}'),
                               ("i_json_lone_surrogate_low", '{"content": "\\udc00 at start"}')):
        g.start(k, case_id)
        text, call = _one_call("get_news", arguments)
        g.emit("A lone surrogate escape inside a string", text, tools=tools_for("get_news"), calls=[call], bugs=(25,))

    k = "JSON.deep-nesting"
    for depth in (32, 128, 512, 1000):
        g.start(k, f"y_json_deep_nesting_{depth}_levels")
        arguments = '{"data": ' + "[" * depth + "1" + "]" * depth + "}"
        text, call = _one_call("calculator", arguments)
        g.emit(f"Arguments nested {depth} levels deep", text, tools=[_tool("calculator", "Eval", {"data": {"type": "array"}})], calls=[call], bugs=(25,))
    g.start(k, "y_json_deep_nesting_objects_64")
    arguments = "".join('{"k": ' for _ in range(64)) + '"leaf"' + "}" * 64
    text, call = _one_call("calculator", arguments)
    g.emit("Objects nested 64 levels deep", text, tools=[_tool("calculator", "Eval", {"k": {"type": "object"}})], calls=[call], bugs=(25,))


# ---------------------------------------------------------------------------------------
# MARKER.*

def _markers(g: _Generator) -> None:
    k = "MARKER.in-json-string"
    named = [("section_begin", SB), ("section_end", SE), ("call_begin", TB), ("argument_begin", AB), ("call_end", TE),
             ("singular_section_begin", SB1), ("singular_section_end", SE1),
             ("think_open", mk.THINK_BEGIN), ("think_close", mk.THINK_END)]
    for label, marker in named:
        r = g.start(k, f"y_marker_in_json_string_{label}")
        arguments = dumps({"file_path": "/docs/kimi.md", "content": f"The token {marker} appears in the chat template.\n"})
        texts, calls = std_calls(r, ["get_weather"], start=1)
        g.emit(f"{marker} inside a JSON string value is literal text, and the next call still parses",
               section(call_text("functions.write_file:0", arguments), *texts), tools=tools_for("write_file", "get_weather"),
               calls=[ToolCall("write_file", arguments, "functions.write_file:0"), *calls], bugs=(22,))
    # <|im_end|> is the end-of-turn token: the model cannot write it into a string without
    # ending its turn there, so the arguments stop at it (END.im-end).
    r = g.start(k, "n_marker_in_json_string_im_end")
    arguments = dumps({"file_path": "/docs/kimi.md", "content": "The token <|im_end|> appears in the chat template.\n"})
    texts, _ = std_calls(r, ["get_weather"], start=1)
    g.emit("<|im_end|> inside a JSON string still ends the turn: the arguments stop there, the next call never comes",
           section(call_text("functions.write_file:0", arguments), *texts), tools=tools_for("write_file", "get_weather"),
           calls=[ToolCall("write_file", arguments[: arguments.index(mk.IM_END)], "functions.write_file:0")], bugs=(22,))
    extra = [
        ("y_marker_in_json_string_all_five", dumps({"content": "".join(mk.TOOL_MARKERS)}), "All five markers back to back in one string"),
        ("y_marker_in_json_string_as_key", dumps({TE: 1, "content": "x"}), "A marker as an object key"),
        ("y_marker_in_json_string_prefix_class22", dumps({"content": "literal <|tool_call_suffix"}), "Class 22: a marker prefix inside a string must be kept"),
        ("y_marker_in_json_string_lone_angle_at_end", dumps({"content": "a <"}), "A lone < at the end of a string value"),
        ("y_marker_in_json_string_after_escaped_quote", '{"content": "say \\"' + TE + '\\" twice"}', "A marker right after an escaped quote"),
        ("y_marker_in_json_string_in_array", dumps({"content": [SE, TB, "functions.get_weather:1", AB]}), "Markers as array elements"),
        ("y_marker_in_json_string_whole_call", dumps({"content": call_text("functions.get_weather:0", '{"city": "Oslo"}')}), "A whole rendered call inside a string"),
    ]
    for case_id, arguments, description in extra:
        g.start(k, case_id)
        text, call = _one_call("get_news", arguments)
        g.emit(description, text, tools=tools_for("get_news"), calls=[call], bugs=(22,))
    k = "MARKER.in-unterminated-string"
    g.start(k, "n_marker_in_unterminated_string_call_end")
    g.emit("A string that never closes swallowed the call end: the marker was structural, the section end still closes",
           section(call_text("functions.get_news:0", '{"content": "AI chips')) + "Done.", tools=tools_for("get_news"),
           calls=[ToolCall("get_news", '{"content": "AI chips', "functions.get_news:0")], content="Done.", bugs=(22, 25))
    g.start(k, "i_marker_in_unterminated_string_next_call")
    out = section(call_text("functions.get_news:0", '{"content": "AI chips'), call_text("functions.get_weather:1", '{"city": "Oslo"}'))
    # The next call's first quote closes the runaway string, so the reference keeps the
    # second call inside the first call's arguments; recovering both calls is as valid.
    g.emit("An unterminated string before a second call: the next quote closes it, so where the first call ends is open",
           out, tools=tools_for("get_news", "get_weather"), bugs=(22, 25))


# ---------------------------------------------------------------------------------------
# WS.*

_WHITESPACE = [("space", " "), ("newline", "\n"), ("crlf", "\r\n"), ("tab", "\t"), ("mixed", " \n\t \n")]


def _whitespace(g: _Generator) -> None:
    k = "WS.around-marker"
    positions = ["after_section_begin", "after_argument_begin", "before_call_end", "after_call_end", "before_section_end", "around_every_marker"]
    for position in positions:
        for ws_label, ws in _WHITESPACE:
            r = g.start(k, f"y_ws_around_marker_{position}_{ws_label}")
            names = r.sample(["get_weather", "read_file", "exec_shell", "web_search"], 2)
            pieces = []
            calls = []
            for i, name in enumerate(names):
                a = dumps(_payload(name, r))
                cid = f"functions.{name}:{i}"
                calls.append(ToolCall(name, a, cid))
                pre_args = ws if position in ("after_argument_begin", "around_every_marker") else ""
                post_args = ws if position in ("before_call_end", "around_every_marker") else ""
                after_end = ws if position in ("after_call_end", "around_every_marker") else ""
                pieces.append(TB + cid + AB + pre_args + a + post_args + TE + after_end)
            lead = ws if position in ("after_section_begin", "around_every_marker") else ""
            tail = ws if position in ("before_section_end",) else ""
            out = SB + lead + "".join(pieces) + tail + SE
            g.emit(f"{ws_label} whitespace {position.replace('_', ' ')}: trimmed from the arguments, ignored in the section",
                   out, tools=tools_for(*names), calls=calls, bugs=(12,))
    for ws_label, ws in _WHITESPACE[:4]:
        r = g.start(k, f"y_ws_around_marker_before_section_begin_{ws_label}")
        content = r.choice(CONTENTS[:4]) + ws
        texts, calls = std_calls(r, ["get_weather"])
        g.emit(f"Content ending in {ws_label} before the section: the content keeps it", content + section(*texts),
               tools=tools_for("get_weather"), calls=calls, content=content, bugs=(12, 21))
    for ws_label, ws in (("newline", "\n"), ("space", " ")):
        r = g.start(k, f"i_ws_around_marker_after_section_end_{ws_label}")
        texts, calls = std_calls(r, ["get_weather"])
        g.emit(f"A {ws_label} after the section end (text after the section)", section(*texts) + ws, tools=tools_for("get_weather"), bugs=(30,))
    r = g.start(k, "i_ws_around_marker_only_whitespace_before_section")
    texts, calls = std_calls(r, ["get_weather"])
    g.emit("Only a newline before the section: content or nothing", "\n" + section(*texts), tools=tools_for("get_weather"), bugs=(12,))
    r = g.start(k, "y_ws_around_marker_class12_raw")
    out = SB + TB + " functions.test:0 " + AB + " {} " + TE + SE
    g.emit("Class 12 raw example: spaces around the id and the arguments", out, tools=[_tool("test", "Test", {})],
           calls=[ToolCall("test", "{}", "functions.test:0")], bugs=(12,))

    k = "WS.in-header"
    for label, before, after in (("leading_newline", "\n", ""), ("trailing_newline", "", "\n"), ("both_spaces", " ", " "),
                                 ("tabs", "\t", "\t"), ("crlf", "\r\n", "\r\n"), ("blank_lines", "\n\n", "\n\n")):
        r = g.start(k, f"y_ws_in_header_{label}")
        a = dumps({"path": "x", "old_string": "a", "new_string": "b"})
        out = section(TB + before + "functions.edit:15" + after + AB + a + TE)
        g.emit(f"Whitespace ({label.replace('_', ' ')}) around the id is ignored", out, tools=tools_for("edit"),
               calls=[ToolCall("edit", a, "functions.edit:15")], bugs=(10,))
    r = g.start(k, "i_ws_in_header_space_inside_id")
    g.emit("A space inside the id after the prefix", section(call_text("functions. get_weather:0", '{"city": "Rome"}')), tools=tools_for("get_weather"), bugs=(10,))
    r = g.start(k, "i_ws_in_header_space_before_index")
    g.emit("A space before the index: functions.get_weather :0", section(call_text("functions.get_weather :0", '{"city": "Rome"}')), tools=tools_for("get_weather"), bugs=(10,))


# ---------------------------------------------------------------------------------------
# STRUCT.*

def _structure(g: _Generator) -> None:
    k = "STRUCT.missing-call-end"
    r = g.start(k, "n_struct_missing_call_end_class14_raw")
    out = section(call_text("functions.a:0", '{"x":"1"}'), TB + "functions.b:1" + AB + '{"y":"2"}', call_text("functions.c:2", '{"z":"3"}'))
    g.emit("Class 14 raw example: the middle call has no end marker; all three calls kept", out,
           tools=[_tool(n, n, {p: _s(p)}) for n, p in (("a", "x"), ("b", "y"), ("c", "z"))],
           calls=[ToolCall("a", '{"x":"1"}', "functions.a:0"), ToolCall("b", '{"y":"2"}', "functions.b:1"), ToolCall("c", '{"z":"3"}', "functions.c:2")], bugs=(14,))
    for label, build in (
        ("before_section_end", lambda a: SB + TB + "functions.get_weather:0" + AB + a + SE),
        ("at_end_of_output", lambda a: SB + TB + "functions.get_weather:0" + AB + a),
        ("before_im_end", lambda a: SB + TB + "functions.get_weather:0" + AB + a + mk.IM_END),
        ("last_of_two", lambda a: SB + call_text("functions.get_weather:0", a) + TB + "functions.get_weather:1" + AB + a + SE),
    ):
        r = g.start(k, f"n_struct_missing_call_end_{label}")
        a = dumps(_payload("get_weather", r))
        out = build(a)
        calls = [ToolCall("get_weather", a, "functions.get_weather:0")]
        if label == "last_of_two":
            calls.append(ToolCall("get_weather", a, "functions.get_weather:1"))
        g.emit(f"A call without its end marker ({label.replace('_', ' ')}) is kept", out, tools=tools_for("get_weather"), calls=calls, bugs=(14,))

    k = "STRUCT.missing-section-end"
    r = g.start(k, "n_struct_missing_section_end_points")
    content = "Checking both cities."
    a0, a1 = '{"city": "Paris", "unit": "celsius"}', '{"city": "Tokyo"}'
    full = content + SB + call_text("functions.get_weather:0", a0) + call_text("functions.get_weather:1", a1) + SE
    c0, c1 = ToolCall("get_weather", a0, "functions.get_weather:0"), ToolCall("get_weather", a1, "functions.get_weather:1")

    def at(needle: str, offset: int = 0, nth: int = 0) -> int:
        i = -1
        for _ in range(nth + 1):
            i = full.index(needle, i + 1)
        return i + offset

    points = [
        ("inside_section_begin_marker", at(SB, 12)),
        ("after_section_begin", at(SB, len(SB))),
        ("inside_call_begin_marker", at(TB, 8)),
        ("after_call_begin", at(TB, len(TB))),
        ("mid_id", at("functions.get_weather:0", 13)),
        ("after_id", at(AB)),
        ("inside_argument_marker", at(AB, 15)),
        ("after_argument_begin", at(AB, len(AB))),
        ("mid_arguments_key", at('"unit"', 3)),
        ("mid_arguments_string", at('"celsius"', 4)),
        ("after_arguments", at(TE)),
        ("inside_call_end_marker", at(TE, 12)),
        ("after_first_call_end", at(TE, len(TE))),
        ("mid_second_id", at("functions.get_weather:1", 20)),
        ("mid_second_arguments", at('"Tokyo"', 3)),
        ("after_second_call_end", at(TE, len(TE), nth=1)),
        ("inside_section_end_marker", at(SE, 20)),
    ]
    for label, cut in points:
        # A cut inside a marker leaves a marker prefix at the end: STRUCT.partial-marker-at-end
        # is implementation-defined (as in corpus/policies), so those cuts are i_.
        verdict = "i" if label.startswith("inside_") else "n"
        g.start(k, f"{verdict}_struct_missing_section_end_{label}")
        out = full[:cut]
        intended_calls = None
        if label in ("after_first_call_end", "mid_second_id"):
            intended_calls = [c0]
        elif label in ("after_second_call_end", "inside_section_end_marker"):
            intended_calls = [c0, c1]
        kwargs: dict[str, Any] = {}
        if intended_calls is not None:
            kwargs = {"calls": intended_calls, "content": content}
        g.emit(f"Output cut off (max_tokens) {label.replace('_', ' ')}: complete calls kept", out, tools=tools_for("get_weather"), bugs=(15,), **kwargs)
    r = g.start(k, "n_struct_missing_section_end_class15_raw")
    g.emit("Class 15 raw example: one complete call, no section end", SB + call_text("functions.get_weather:0", '{"location":"NYC"}'),
           tools=[_tool("get_weather", "Weather", {"location": _s("Location")})], calls=[ToolCall("get_weather", '{"location":"NYC"}', "functions.get_weather:0")], bugs=(15,))
    r = g.start(k, "n_struct_missing_section_end_thinking_mid_reasoning")
    g.emit("Thinking on, cut off inside the reasoning", "The user wants the weather in Paris, so I should call", thinking=True,
           tools=tools_for("get_weather"), calls=[], reasoning="The user wants the weather in Paris, so I should call", bugs=(15, 27))

    k = "STRUCT.several-sections"
    r = g.start(k, "i_struct_several_sections_class16_raw")
    out = ("Prefix text:" + section(call_text("functions.get_weather:0", '{"city": "London"}')) + " Now calling next: "
           + section(call_text("functions.get_weather:1", '{"city": "Delhi"}')))
    g.emit("Class 16 raw example: two sections with text before and between", out, tools=tools_for("get_weather"), bugs=(16,))
    r = g.start(k, "i_struct_several_sections_adjacent")
    t0, c0s = std_calls(r, ["read_file"])
    t1, c1s = std_calls(r, ["exec_shell"], start=1)
    g.emit("Two sections back to back with nothing between", section(*t0) + section(*t1), tools=tools_for("read_file", "exec_shell"), bugs=(16,))
    r = g.start(k, "i_struct_several_sections_three")
    ts = [std_calls(r, [n], start=i)[0] for i, n in enumerate(["get_weather", "get_news", "web_search"])]
    g.emit("Three sections, one call each", "".join(section(*t) for t in ts), tools=tools_for("get_weather", "get_news", "web_search"), bugs=(16,))

    k = "STRUCT.text-between"
    for label, between in (("sentence", " Now the second city: "), ("newlines", "\n\n"), ("markdown", "\n**Next step:** run the tests.\n")):
        r = g.start(k, f"i_struct_text_between_{label}")
        t0, _ = std_calls(r, ["get_weather"])
        t1, _ = std_calls(r, ["exec_shell"], start=1)
        g.emit(f"Text ({label}) between two sections", section(*t0) + between + section(*t1), tools=tools_for("get_weather", "exec_shell"), bugs=(16,))

    k = "STRUCT.text-before"
    for label, content in (
        ("short", "I'll check the weather."),
        ("multiline_markdown", "## Plan\n\n- read `main.py`\n- fix the port\n\n"),
        ("less_than_signs", "Since 3 < 5 and a<b, I'll compute it: "),
        ("marker_lookalike", "The format uses <|tool_calls_section|>-like tokens, e.g. <|tool_ and <|im_. "),
        ("id_lookalike", "Calling functions.get_weather:0 now "),
        ("chinese", "好的，我先查一下北京的天气。"),
        ("html", "<div class=\"note\">Checking…</div>\n"),
        ("class21_raw", "This is a content:"),
    ):
        r = g.start(k, f"y_struct_text_before_{label}")
        texts, calls = std_calls(r, ["get_weather"])
        g.emit(f"Content before the section ({label.replace('_', ' ')}) is content", content + section(*texts), tools=tools_for("get_weather"),
               calls=calls, content=content, bugs=(21,))
    r = g.start(k, "y_struct_text_before_content_only_with_angle_brackets")
    content = "Use a < b and b > a; the tag <think> is not special here."
    g.emit("A final answer with no calls and angle brackets", content + mk.IM_END, tools=tools_for("get_weather"), calls=[], content=content, bugs=(21,))

    k = "STRUCT.text-after"
    for label, after in (("class30_raw", " Let me check."), ("newline_sentence", "\nI'll wait for the result."),
                         ("markdown", "\n\n---\n*pending*"), ("then_im_end", " Done.")):
        r = g.start(k, f"i_struct_text_after_{label}")
        texts, _ = std_calls(r, ["get_weather"])
        before = "I'll help you with that. " if label == "class30_raw" else ""
        tail = mk.IM_END if label == "then_im_end" else ""
        g.emit(f"Text after the section end ({label.replace('_', ' ')})", before + section(*texts) + after + tail, tools=tools_for("get_weather"), bugs=(30,))

    k = "STRUCT.noise-in-section"
    for label, build in (
        ("after_section_begin", lambda t: SB + " spurious text " + "".join(t) + SE),
        ("between_calls", lambda t: SB + t[0] + "and now: " + t[1] + SE),
        ("before_section_end", lambda t: SB + "".join(t) + "(end)" + SE),
        ("json_fragment", lambda t: SB + t[0] + '"}' + t[1] + SE),
    ):
        r = g.start(k, f"n_struct_noise_in_section_{label}")
        texts, calls = std_calls(r, ["get_weather", "read_file"])
        g.emit(f"Noise inside the section ({label.replace('_', ' ')}) is dropped, never content", build(texts),
               tools=tools_for("get_weather", "read_file"), calls=calls, bugs=(17,))

    k = "STRUCT.singular-section-markers"
    for label, begin, end, bugs in (("both_class13_raw", SB1, SE1, (13,)), ("begin_only", SB1, SE, (13,)), ("end_only", SB, SE1, (13,))):
        r = g.start(k, f"i_struct_singular_section_markers_{label}")
        a = dumps({"path": "/test.py"})
        out = "prefix" + begin + call_text("functions.ReadFile:0", a) + end
        g.emit(f"Singular section markers ({label.replace('_', ' ')})", out, tools=tools_for("ReadFile"),
               calls=[ToolCall("ReadFile", a, "functions.ReadFile:0")], content="prefix", bugs=bugs)
    r = g.start(k, "i_struct_singular_section_markers_thinking")
    a = dumps({"path": "/a.ts"})
    out = "I should read it.</think>" + SB1 + call_text("functions.ReadFile:0", a) + SE1
    g.emit("K2-Thinking style: reasoning, then a singular-marker section", out, tools=tools_for("ReadFile"), thinking=True,
           calls=[ToolCall("ReadFile", a, "functions.ReadFile:0")], reasoning="I should read it.", bugs=(13, 27))

    k = "STRUCT.call-without-section"
    r = g.start(k, "n_struct_call_without_section_class18_raw")
    out = TB + " functions.get_weather:0 " + AB + ' {"city": "Tokyo"} ' + TE
    g.emit("Class 18 raw example: a call with no section markers", out, tools=tools_for("get_weather"),
           calls=[ToolCall("get_weather", '{"city": "Tokyo"}', "functions.get_weather:0")], bugs=(18,))
    r = g.start(k, "n_struct_call_without_section_after_content")
    texts, calls = std_calls(r, ["read_file", "exec_shell"])
    g.emit("Content then two calls with no section markers", "Let me look." + "".join(texts), tools=tools_for("read_file", "exec_shell"),
           calls=calls, content="Let me look.", bugs=(27,))

    k = "STRUCT.stray-marker"
    for label, build in (
        ("argument_begin_in_section", lambda t: SB + AB + t + SE),
        ("section_begin_in_section", lambda t: SB + SB + t + SE),
        ("call_end_in_section", lambda t: SB + TE + t + SE),
    ):
        r = g.start(k, f"n_struct_stray_marker_{label}")
        texts, calls = std_calls(r, ["get_weather"])
        g.emit(f"A stray marker ({label.replace('_', ' ')}) is dropped", build(texts[0]), tools=tools_for("get_weather"), calls=calls, bugs=(29,))

    k = "STRUCT.empty-section"
    r = g.start(k, "i_struct_empty_section")
    g.emit("A section with no calls", SB + SE, tools=tools_for("get_weather"), bugs=(23,))
    r = g.start(k, "i_struct_empty_section_after_content")
    g.emit("Content then a section with only whitespace", "Nothing to call." + SB + "\n" + SE, tools=tools_for("get_weather"), bugs=(23,))


# ---------------------------------------------------------------------------------------
# THINK.*, SPECIAL.*, UTF8.*

def _thinking(g: _Generator) -> None:
    k = "THINK.on"
    for label, lead, content in (("reasoning_content_calls", "", "Let me check."), ("leading_open_tag", mk.THINK_BEGIN, "Checking now."),
                                 ("calls_only", "", None), ("multiline_reasoning", mk.THINK_BEGIN, "On it.\n")):
        r = g.start(k, f"y_think_on_{label}")
        reasoning = "The user asks about two cities.\nI should call get_weather twice, once per city."
        texts, calls = std_calls(r, ["get_weather", "get_weather"])
        out = lead + reasoning + mk.THINK_END + (content or "") + section(*texts)
        g.emit(f"Thinking on: reasoning, </think>, {'content, ' if content else ''}calls", out, tools=tools_for("get_weather"), thinking=True,
               calls=calls, content=content, reasoning=reasoning, bugs=(27,))
    r = g.start(k, "y_think_on_answer_only")
    g.emit("Thinking on, reasoning and a final answer without calls", "Simple question: 2+2.</think>It is 4." + mk.IM_END, thinking=True,
           calls=[], content="It is 4.", reasoning="Simple question: 2+2.", bugs=(27,))
    r = g.start(k, "y_think_on_reasoning_mentions_markers_as_words")
    reasoning = "I will use tool_calls_section_begin syntax and compare a < b."
    texts, calls = std_calls(r, ["read_file"])
    g.emit("Reasoning with a lone < and marker words", reasoning + mk.THINK_END + section(*texts), thinking=True, tools=tools_for("read_file"),
           calls=calls, reasoning=reasoning, bugs=(27,))

    k = "THINK.off"
    for label, out in (("think_block_in_content", "<think>hmm</think>The answer is 42."),
                       ("only_close_tag", "done thinking</think>Here you go."),
                       ("think_then_call", "<think>need weather</think>" + section(call_text("functions.get_weather:0", '{"city": "Oslo"}')))):
        g.start(k, f"i_think_off_{label}")
        g.emit(f"Thinking off: think tags are content ({label.replace('_', ' ')})", out, tools=tools_for("get_weather"), bugs=(27,))

    k = "THINK.unclosed-with-calls"
    r = g.start(k, "n_think_unclosed_with_calls_class27_raw")
    a = dumps({"path": "/a.ts"})
    out = "<think>I need to read the file." + section(call_text("functions.ReadFile:5", a))
    g.emit("Class 27 raw example: calls inside an unclosed think block are calls", out, thinking=True, tools=tools_for("ReadFile"),
           calls=[ToolCall("ReadFile", a, "functions.ReadFile:5")], reasoning="I need to read the file.", bugs=(27,))
    r = g.start(k, "n_think_unclosed_with_calls_no_section")
    out = "Read it first." + call_text("functions.ReadFile:0", a)
    g.emit("llama.cpp shape: a bare call begin inside unclosed reasoning", out, thinking=True, tools=tools_for("ReadFile"),
           calls=[ToolCall("ReadFile", a, "functions.ReadFile:0")], reasoning="Read it first.", bugs=(27,))
    r = g.start(k, "n_think_unclosed_with_calls_parallel")
    texts, calls = std_calls(r, ["get_weather", "web_search"])
    g.emit("Two calls inside an unclosed think block", "Two lookups needed." + section(*texts), thinking=True,
           tools=tools_for("get_weather", "web_search"), calls=calls, reasoning="Two lookups needed.", bugs=(27,))

    k = "THINK.unterminated"
    g.start(k, "n_think_unterminated_reasoning_only")
    g.emit("Thinking on and no end of reasoning: all reasoning", "<think>Still thinking about the", thinking=True, calls=[],
           reasoning="Still thinking about the", bugs=(27,))
    g.start(k, "n_think_unterminated_close_tag_stripped")
    g.emit("The </think> was stripped (skip_special_tokens): the answer reads as reasoning", "Reasoning here.The answer is 4.", thinking=True,
           calls=[], reasoning="Reasoning here.The answer is 4.", bugs=(28,))


def _special(g: _Generator) -> None:
    k = "SPECIAL.im-end-in-content"
    g.start(k, "y_special_im_end_after_answer")
    g.emit("A final answer closed by <|im_end|>", "It's sunny in Beijing today." + mk.IM_END, calls=[], content="It's sunny in Beijing today.", bugs=(30,))
    g.start(k, "n_special_im_end_then_garbage")
    g.emit("Text after <|im_end|> is not part of the message", "It's sunny." + mk.IM_END + "<|im_user|>user<|im_middle|>thanks", calls=[], content="It's sunny.", bugs=(30,))
    r = g.start(k, "n_special_im_end_between_calls")
    texts, calls = std_calls(r, ["get_weather", "get_weather"])
    g.emit("<|im_end|> between two calls ends the message after the first", SB + texts[0] + mk.IM_END + texts[1] + SE, tools=tools_for("get_weather"),
           calls=calls[:1], bugs=(18,))
    g.start(k, "n_special_im_end_in_arguments_outside_string")
    g.emit("<|im_end|> inside the arguments, outside a string", SB + TB + "functions.get_weather:0" + AB + '{"city": "Rome"' + mk.IM_END + "}" + TE + SE,
           tools=tools_for("get_weather"), calls=[ToolCall("get_weather", '{"city": "Rome"', "functions.get_weather:0")], bugs=(18,))
    g.start(k, "n_special_im_end_in_reasoning")
    g.emit("<|im_end|> inside the reasoning ends the message", "thinking" + mk.IM_END + "more</think>answer", thinking=True, calls=[], reasoning="thinking", bugs=(30,))

    k = "SPECIAL.other-specials-in-content"
    for label, token in (("im_user", mk.IM_USER), ("im_assistant", mk.IM_ASSISTANT), ("im_system", mk.IM_SYSTEM), ("im_middle", mk.IM_MIDDLE),
                         ("bos", mk.BOS), ("eos", mk.EOS), ("media", "<|media_start|>image<|media_content|><|media_pad|><|media_end|>")):
        r = g.start(k, f"i_special_other_specials_in_content_{label}")
        texts, _ = std_calls(r, ["get_weather"])
        g.emit(f"{token} in content before the section", f"Before {token} after. " + section(*texts), tools=tools_for("get_weather"), bugs=(18,))
    for label, token in (("im_user", mk.IM_USER), ("im_middle", mk.IM_MIDDLE)):
        g.start(k, f"y_special_other_specials_in_arguments_{label}")
        text, call = _one_call("get_news", dumps({"content": f"template uses {token} between name and body"}))
        g.emit(f"{token} inside a JSON string of the arguments", text, tools=tools_for("get_news"), calls=[call], bugs=(18,))

    k = "SPECIAL.markers-stripped"
    g.start(k, "i_special_markers_stripped_single_call")
    g.emit("What a parser sees after skip_special_tokens removed the markers of one call", 'functions.get_weather:0{"city": "Beijing"}',
           tools=tools_for("get_weather"), bugs=(28,))
    g.start(k, "i_special_markers_stripped_two_calls_with_content")
    g.emit("Content and two calls with the markers stripped", 'Checking.functions.get_weather:0{"city": "Paris"}functions.get_weather:1{"city": "Rome"}',
           tools=tools_for("get_weather"), bugs=(28,))


_SPLIT_CHARS = ["🦄", "龘", "😀", "𝔘"]


def _utf8(g: _Generator) -> None:
    k = "UTF8.split-multibyte"
    samples = [
        ("content_emoji", "content", "Here is a unicorn 🦄 and a grin 😀 for you."),
        ("content_rare_han", "content", "生僻字：龘龘龘。"),
        ("arguments_emoji", "args", "Party time 🦄🦄 😀!"),
        ("arguments_rare_han", "args", "龘 is written with 48 strokes"),
        ("arguments_zwj_family", "args", "family 👨‍👩‍👧‍👦 emoji"),
        ("arguments_flags", "args", "flags 🇯🇵🇫🇷🇧🇷"),
        ("arguments_math_letters", "args", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 letters"),
        ("arguments_combining", "args", "e\u0301 and n\u0303 combining marks"),
        ("emoji_next_to_markers", "both", "🦄"),
        ("reasoning_emoji", "reasoning", "Thinking about 🦄 and 龘…"),
        ("arabic_rtl", "args", "مرحبا بالعالم 😀"),
    ]
    for label, where, text in samples:
        r = g.start(k, f"y_utf8_split_multibyte_{label}")
        content = reasoning = None
        thinking = False
        if where == "args" or where == "both":
            arguments = dumps({"content": text})
        else:
            arguments = dumps(_payload("get_news", r))
        body = section(call_text("functions.get_news:0", arguments))
        calls = [ToolCall("get_news", arguments, "functions.get_news:0")]
        if where == "content":
            content = text
            out = text + body
        elif where == "both":
            content = text
            out = text + body
        elif where == "reasoning":
            thinking = True
            reasoning = text
            out = text + mk.THINK_END + body
        else:
            out = body
        g.emit(f"Multibyte characters split across tokens, in the {where}", out, tools=tools_for("get_news"), thinking=thinking,
               calls=calls, content=content, reasoning=reasoning, bugs=(22,))


# ---------------------------------------------------------------------------------------
# SPLIT.*, LONG.*

def _cut(text: str, points: Sequence[int]) -> list[str]:
    points = sorted(set(p for p in points if 0 < p < len(text)))
    out, last = [], 0
    for p in points:
        out.append(text[last:p])
        last = p
    out.append(text[last:])
    return out


def _split(g: _Generator) -> None:
    k = "SPLIT.marker"
    content = "Let me run both."
    a0, a1 = '{"command": "ls"}', '{"path": "/srv/app/main.py"}'
    full = content + SB + call_text("functions.exec_shell:0", a0) + call_text("functions.read_file:1", a1) + SE
    calls = [ToolCall("exec_shell", a0, "functions.exec_shell:0"), ToolCall("read_file", a1, "functions.read_file:1")]
    tools = tools_for("exec_shell", "read_file")
    for label, marker in (("section_begin", SB), ("call_begin", TB), ("argument_begin", AB), ("call_end", TE), ("section_end", SE)):
        start = full.index(marker)
        for offset in (1, len(marker) // 2, len(marker) - 1):
            g.start(k, f"y_split_marker_{label}_at_{offset}")
            deltas = _cut(full, [start, start + offset, start + len(marker)])
            g.emit(f"The {label.replace('_', ' ')} marker cut after {offset} characters: {marker[:offset]!r} + {marker[offset:]!r}",
                   deltas=deltas, tools=tools, calls=calls, content=content, bugs=(22,))
    g.start(k, "y_split_marker_class22_raw")
    deltas = [content + SB + TB + "functions.exec_shell:0" + AB + a0, "<|tool_call_", "end|>", call_text("functions.read_file:1", a1), SE]
    g.emit("Class 22 raw deltas: '<|tool_call_' + 'end|>' after the arguments", deltas=deltas, tools=tools, calls=calls, content=content, bugs=(22,))
    g.start(k, "y_split_marker_te_tb_one_delta_class20")
    i = full.index(TE)
    j = full.index(AB, i) + len(AB) + 2
    deltas = [full[: i - 2], full[i - 2 : j], full[j:]]
    g.emit("Class 20: speculative decoding sends the end of one call and the head of the next in one delta", deltas=deltas, tools=tools,
           calls=calls, content=content, bugs=(20,))
    g.start(k, "y_split_marker_whole_output_one_delta_class21")
    g.emit("Class 21: content and the whole section in one chunk", deltas=[full], tools=tools, calls=calls, content=content, bugs=(21,))
    g.start(k, "y_split_marker_content_and_section_begin_one_delta")
    g.emit("Content and the section begin in one delta, the calls after", deltas=[content + SB, full[len(content + SB):]], tools=tools,
           calls=calls, content=content, bugs=(21,))
    g.start(k, "y_split_marker_call_end_per_character")
    i = full.index(TE)
    deltas = [full[:i], *TE, full[i + len(TE):]]
    g.emit("The first call end marker one character per delta", deltas=deltas, tools=tools, calls=calls, content=content, bugs=(22,))
    g.start(k, "y_split_marker_empty_deltas")
    deltas = [content, "", SB, "", "", full[len(content + SB):], ""]
    g.emit("Empty deltas between the pieces", deltas=deltas, tools=tools, calls=calls, content=content, bugs=(23,))
    g.start(k, "y_split_marker_prefix_in_string")
    a2 = dumps({"content": "literal <|tool_call_suffix"})
    out = section(call_text("functions.get_news:0", a2))
    i = out.index("<|tool_call_suffix")
    g.emit("A marker prefix in a string cut at the delta end, then a non-marker continuation", deltas=[out[: i + 12], out[i + 12:]],
           tools=tools_for("get_news"), calls=[ToolCall("get_news", a2, "functions.get_news:0")], bugs=(22,))
    g.start(k, "y_split_marker_lone_angle_in_content")
    texts, c = std_calls(random.Random(0), ["get_weather"])
    g.emit("A lone < at a delta end in content is released, not swallowed", deltas=["If a <", " b then call.", section(*texts)],
           tools=tools_for("get_weather"), calls=c, content="If a < b then call.", bugs=(22,))
    g.start(k, "y_split_marker_backslash_at_delta_end")
    a3 = dumps({"command": 'echo "a\\"b"'})
    out = section(call_text("functions.exec_shell:0", a3))
    i = out.index("\\")
    g.emit("A backslash escape cut between deltas", deltas=[out[: i + 1], out[i + 1:]], tools=tools_for("exec_shell"),
           calls=[ToolCall("exec_shell", a3, "functions.exec_shell:0")], bugs=(22,))
    g.start(k, "y_split_marker_think_end")
    reasoning = "Need the file."
    texts, c = std_calls(random.Random(1), ["read_file"])
    out = reasoning + mk.THINK_END + section(*texts)
    i = out.index(mk.THINK_END)
    g.emit("</think> cut as '</thi' + 'nk>'", deltas=[out[: i + 5], out[i + 5:]], thinking=True, tools=tools_for("read_file"), calls=c,
           reasoning=reasoning, bugs=(27,))
    g.start(k, "n_split_marker_noise_in_section_class17")
    t, c = std_calls(random.Random(2), ["get_weather"])
    g.emit("Class 17 deltas: text, section begin, spurious text, call", deltas=["Reasoning... ", SB, " spurious text ", t[0], SE],
           tools=tools_for("get_weather"), calls=c, content="Reasoning... ", bugs=(17,))
    g.start(k, "n_split_marker_call_without_section_one_delta_class18")
    one = TB + " functions.get_weather:0 " + AB + ' {"city": "Tokyo"} ' + TE
    g.emit("Class 18: a whole call without section markers as one delta", deltas=[one], tools=tools_for("get_weather"),
           calls=[ToolCall("get_weather", '{"city": "Tokyo"}', "functions.get_weather:0")], bugs=(18,))
    for n in range(1, 6):
        r = g.start(k, f"y_split_marker_random_cuts_{n}")
        names = r.sample(["get_weather", "read_file", "exec_shell", "web_search", "天气查询"], 3)
        texts, c = std_calls(r, names)
        text = r.choice(CONTENTS) + section(*texts)
        content = text[: text.index(SB)]
        cuts = sorted(r.sample(range(1, len(text)), min(len(text) - 1, 4 + 4 * n)))
        g.emit(f"{len(cuts) + 1} seeded random deltas over three calls", deltas=_cut(text, cuts), tools=tools_for(*names), calls=c,
               content=content, bugs=(22, 20))
    r = g.start(k, "y_split_marker_token_bursts")
    names = ["get_weather", "get_news", "read_file", "exec_shell"]
    texts, c = std_calls(r, names)
    text = section(*texts)
    cuts, pos = [], 0
    while pos < len(text):
        pos += r.randint(3, 40)
        cuts.append(pos)
    g.emit("Speculative-decoding bursts of 3 to 40 characters over four calls", deltas=_cut(text, cuts), tools=tools_for(*names), calls=c, bugs=(20,))


def _long(g: _Generator) -> None:
    k = "LONG.arguments"
    r = g.start(k, "y_long_arguments_write_file_12kb")
    body = []
    while sum(map(len, body)) < 12_000:
        n = r.randint(0, 999)
        body.append(f"def handler_{n}(request, timeout={r.randint(1, 60)}):  # route /api/v1/items/{n} -- returns the item's JSON payload unchanged\n")
    a = dumps({"file_path": "/srv/app/handlers.py", "content": "".join(body)})
    g.emit("A 12 KB file write (realistic code, escaped newlines)", section(call_text("functions.write_file:0", a)), tools=tools_for("write_file"),
           calls=[ToolCall("write_file", a, "functions.write_file:0")], bugs=(19, 23))
    r = g.start(k, "y_long_arguments_base64_32kb")
    blob = base64.b64encode(r.randbytes(24_000)).decode("ascii")
    a = dumps({"file_path": "/tmp/image.png.b64", "content": blob})
    g.emit("A 32 KB base64 payload", section(call_text("functions.write_file:0", a)), tools=tools_for("write_file"),
           calls=[ToolCall("write_file", a, "functions.write_file:0")], bugs=(19,))
    r = g.start(k, "y_long_arguments_x_10000_class19")
    a = dumps({"file_path": "/tmp/x.txt", "content": "x" * 10_000})
    g.emit("Class 19: 'x'*10000 arguments past an 8 KB section cap", section(call_text("functions.write_file:0", a)), tools=tools_for("write_file"),
           calls=[ToolCall("write_file", a, "functions.write_file:0")], bugs=(19,))
    r = g.start(k, "y_long_arguments_two_12kb_calls")
    a0 = dumps({"file_path": "/tmp/a.txt", "content": "a" * 12_000})
    a1 = dumps({"file_path": "/tmp/b.txt", "content": "b" * 12_000})
    g.emit("Two 12 KB file writes in one section", section(call_text("functions.write_file:0", a0), call_text("functions.write_file:1", a1)),
           tools=tools_for("write_file"), calls=[ToolCall("write_file", a0, "functions.write_file:0"), ToolCall("write_file", a1, "functions.write_file:1")], bugs=(19, 23))


# ---------------------------------------------------------------------------------------
# RENDER.* (prompt cases) and the strict-tool completion

def _render(g: _Generator) -> None:
    weather = TOOLS["get_weather"]
    user = {"role": "user", "content": "What's the weather like in Beijing today? Use the tool to check."}
    system = {"role": "system", "content": "You are Kimi, an AI assistant created by Moonshot AI."}
    for label, call_id in (("foreign_call_id", "call_59adf5614cfe4f4b8a71be54"), ("standard_id", "functions.get_weather:0"), ("toolu_id", "toolu_01A09q90qw90lq917835lq9")):
        g.start("RENDER.id-round-trip", f"y_render_id_round_trip_{label}")
        messages = [system, user,
                    {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Beijing"}'}}]},
                    {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": '{"weather": "Sunny"}'}]
        g.emit_prompt(f"The history id {call_id} is rendered verbatim in the call and in its result", messages, [weather], True,
                      [TB + call_id + AB, f"## Return of {call_id}\n"], bugs=(31, 32))
    g.start("RENDER.empty-content", "y_render_empty_content_before_section")
    messages = [system, user, {"role": "assistant", "content": "", "tool_calls": [{"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Beijing"}'}}]}]
    g.emit_prompt("Empty assistant content renders nothing before the section", messages, [weather], False,
                  [mk.IM_MIDDLE + SB], bugs=(32,))
    g.start("RENDER.generation-prompt", "y_render_generation_prompt_suffix")
    g.emit_prompt("add_generation_prompt ends the prompt with the assistant header", [system, user], [weather], True,
                  [user["content"] + mk.IM_END + mk.IM_ASSISTANT + "assistant" + mk.IM_MIDDLE], bugs=(32,))
    strict = _tool("get_weather", "Get weather information", {"city": _s("City name")}, ["city"], strict=True)
    g.start("RENDER.strict-tool", "y_render_strict_tool_declared")
    g.emit_prompt('A tool with "strict": true is declared verbatim', [system, user], [strict], True, ['"strict":true'], bugs=(33,))
    g.start("RENDER.strict-tool", "y_render_strict_tool_call_parses")
    a = '{"city": "Beijing"}'
    g.emit('A call to a tool declared with "strict": true parses like any other', section(call_text("functions.get_weather:0", a)),
           tools=[strict], calls=[ToolCall("get_weather", a, "functions.get_weather:0")], bugs=(33,))


_SECTIONS: list[Callable[[_Generator], None]] = [_ids, _parallel, _json, _markers, _whitespace, _structure, _thinking, _special, _utf8, _split, _long, _render]


def _build(seed: int) -> _Generator:
    g = _Generator(seed)
    for build in _SECTIONS:
        build(g)
    ids = [c.id for c in g.cases] + [p.id for p in g.prompts]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise GeneratorError(f"duplicate case ids: {sorted(duplicates)}")
    return g


def generate_cases(seed: int = DEFAULT_SEED) -> list[CompletionCase]:
    """Every generated completion case, in a fixed order."""
    return _build(seed).cases


def generate_prompt_cases(seed: int = DEFAULT_SEED) -> list[PromptCase]:
    """The generated prompt (render) cases."""
    return _build(seed).prompts


def group_of(case: CompletionCase | PromptCase) -> str:
    """The folder of a case: its class prefix in lower case (``ID.dotted-name`` -> ``id``)."""
    for tag in case.tags:
        if tag in CLASSES:
            return tag.split(".")[0].lower()
    raise GeneratorError(f"{case.id}: no taxonomy class among its tags")


# ---------------------------------------------------------------------------------------
# docs/taxonomy.md

def render_taxonomy(g: _Generator) -> str:
    by_class: dict[str, list[str]] = {c: [] for c in CLASSES}
    for case in [*g.cases, *g.prompts]:
        for tag in case.tags:
            if tag in by_class:
                by_class[tag].append(case.id)
    by_bug: dict[int, list[str]] = {n: [] for n in BUGS}
    for case_id, bugs in g.bugs_of.items():
        for n in bugs:
            by_bug[n].append(case_id)
    for n, ids in by_bug.items():
        if not ids:
            raise GeneratorError(f"known bug class {n} has no case")
    for c, ids in by_class.items():
        if not ids:
            raise GeneratorError(f"taxonomy class {c} has no case")
    verdicts = {v: sum(1 for c in [*g.cases, *g.prompts] if c.id[0] == v) for v in "yni"}
    lines = [
        "# Edge-case taxonomy",
        "",
        "<!-- Written by `python -m k2conform.case.generate` from `conformance/k2conform/case/generate.py`; edit the generator, not this file. -->",
        "",
        "Every generated case in `corpus/generated/<group>/` belongs to one class below (its first tag; the group is",
        "the class prefix in lower case). The case's other tags are the reference policies that fired",
        "(see `docs/policies.md`). Verdicts: `y_` well-formed per the spec (the generator checks the reference parser",
        "returns exactly the calls it built), `n_` malformed where the required behaviour is the reference policy,",
        "`i_` implementation-defined (the spec does not decide; the reference result is recorded, not judged).",
        f"Base seed {g.base_seed}; each case's own seed is in its `generator` field.",
        "",
        f"Totals: {len(g.cases)} completion cases and {len(g.prompts)} prompt cases; "
        f"{verdicts['y']} `y_`, {verdicts['n']} `n_`, {verdicts['i']} `i_`.",
        "",
        "Bug-class numbers refer to `/work/shared/research/known_bug_classes.md` (public tracker threads).",
        "",
        "## Classes",
        "",
    ]
    for c in CLASSES.values():
        bugs = ", ".join(f"[{n}]({BUGS[n][1][0]})" for n in c.bugs) or "—"
        lines += [
            f"### `{c.id}`",
            "",
            f"- **Definition:** {c.definition}",
            f"- **Why it matters:** {c.why} Known bug classes: {bugs}.",
            f"- **Cases ({len(by_class[c.id])}):** " + ", ".join(f"`{i}`" for i in by_class[c.id]),
            "",
        ]
    lines += [
        "## Known bug classes → cases",
        "",
        "Every one of the 33 known bug classes, with the cases built from it (the floor, not the ceiling).",
        "",
        "| # | known bug class | cases | reach |",
        "|---|---|---|---|",
    ]
    for n, (title, urls) in BUGS.items():
        ids = by_bug[n]
        note = BUG_NOTES.get(n, "Parser-side; covered directly.")
        links = " ".join(f"[link]({u})" for u in urls)
        lines.append(f"| {n} | {title} {links} | " + ", ".join(f"`{i}`" for i in ids) + f" | {note} |")
    lines += [
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Writing and checking

def _expected_files(seed: int = DEFAULT_SEED) -> dict[str, str]:
    """Relative path (under the repository root) -> file text, for everything the generator owns."""
    from k2conform.model import dumps_canonical

    g = _build(seed)
    files: dict[str, str] = {}
    for case in [*g.cases, *g.prompts]:
        files[f"corpus/generated/{group_of(case)}/{case.id}.json"] = dumps_canonical(case.to_json())
    files["docs/taxonomy.md"] = render_taxonomy(g)
    return files


def write_generated(root: Path | str, seed: int = DEFAULT_SEED) -> list[Path]:
    """(Re)write ``root/corpus/generated`` (stale files removed first) and ``root/docs/taxonomy.md``."""
    root = Path(root)
    g = _build(seed)
    target = root / "corpus" / "generated"
    if target.exists():
        for stale in sorted(target.rglob("*"), reverse=True):
            if stale.is_file():
                stale.unlink()
            else:
                stale.rmdir()
    written = [write_case(case, target / group_of(case)) for case in [*g.cases, *g.prompts]]
    doc = root / "docs" / "taxonomy.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(render_taxonomy(g), encoding="utf-8")
    return [*written, doc]


def check_generated(root: Path | str, seed: int = DEFAULT_SEED) -> list[str]:
    """Problems of the checked-in files against what the generator writes (empty: in sync)."""
    root = Path(root)
    expected = _expected_files(seed)
    problems = []
    for rel, text in sorted(expected.items()):
        path = root / rel
        if not path.exists():
            problems.append(f"missing: {rel}")
        elif path.read_bytes() != text.encode("utf-8"):
            problems.append(f"changed: {rel}")
    generated = root / "corpus" / "generated"
    if generated.exists():
        for path in sorted(generated.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in expected:
                problems.append(f"stale: {rel}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m k2conform.case.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 listing files that differ from what the generator writes")
    parser.add_argument("--root", type=Path, default=checkout_root(), help="repository root (default: this checkout)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED})")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_generated(args.root, args.seed)
        for problem in problems:
            print(problem)
        if problems:
            print(f"{len(problems)} file(s) differ; run python -m k2conform.case.generate", file=sys.stderr)
            return 1
        print("corpus/generated and docs/taxonomy.md are up to date")
        return 0
    written = write_generated(args.root, args.seed)
    print(f"wrote {len(written) - 1} cases under {args.root / 'corpus' / 'generated'} and {args.root / 'docs' / 'taxonomy.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
