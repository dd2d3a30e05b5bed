"""Every point where the Kimi K2 spec is silent, decided once, with a stable id.

The reference parser names the policies that fired in ``result.meta["policies"]``, so
a reader of a report sees *why* the reference returned what it did.
"""

from __future__ import annotations

POLICIES: dict[str, str] = {
    # Names and ids
    "ID.standard": (
        "The id is `functions.NAME:IDX`; NAME is everything between the prefix and the last colon."
    ),
    "ID.dotted-name": (
        "A dotted NAME is kept whole; with declared tools, the longest declared "
        "dotted suffix is used when the whole name is not declared."
    ),
    "ID.colon-in-name": "NAME may contain colons: only the last `:IDX` is the index.",
    "ID.no-prefix": "An id without the `functions.` prefix is read the same way (NAME:IDX).",
    "ID.no-index": (
        "An id without a numeric `:IDX` suffix keeps the whole id (after the prefix) as NAME."
    ),
    "ID.foreign": (
        "An id that names no declared tool (call_..., toolu_..., bare counters): the "
        "name is inferred from the arguments when exactly one declared tool accepts "
        "them; otherwise the id stem is the name."
    ),
    "ID.undeclared-name": (
        "A name that matches no declared tool is kept as written (the "
        "comparison, not the parser, judges it)."
    ),
    "ID.whitespace": (
        "Whitespace and newlines around the id (between the call and argument markers) are ignored."
    ),
    "ID.verbatim": (
        "The OpenAI `id` is the model's id verbatim (trimmed); the OpenAI `index` is "
        "the call's position in the message."
    ),
    # Arguments
    "ARGS.raw": (
        "Arguments are the raw text between the argument marker and the call end, trimmed "
        "of surrounding whitespace."
    ),
    "ARGS.invalid-json": (
        "Arguments that are not valid JSON are kept as the raw string (never "
        "dropped, never repaired)."
    ),
    "ARGS.marker-in-string": (
        "Marker text inside a JSON string of the arguments is literal text of that string."
    ),
    "ARGS.unterminated-string": (
        "If the output ends inside a JSON string that swallowed a marker, "
        "that marker was structural after all: the arguments end there "
        "and the rest is parsed again, markers always structural from "
        "then on."
    ),
    "ARGS.empty": "Empty arguments are reported as the empty string.",
    # Structure
    "STRUCT.missing-call-end": (
        "A call whose end marker is missing ends at the next call begin, "
        "the section end or the end of the output, and is kept."
    ),
    "STRUCT.missing-section-end": (
        "A section whose end marker is missing ends at the end of the "
        "output; its complete calls are kept."
    ),
    "STRUCT.truncated-header": "A call cut off before its argument marker is dropped.",
    "STRUCT.call-without-section": "A call begin outside a section opens the section implicitly.",
    "STRUCT.section-noise": (
        "Text inside a section but outside any call is dropped (never "
        "content); whitespace there is expected."
    ),
    "STRUCT.stray-marker": (
        "A marker where the grammar has no place for it (a section end, call "
        "end or argument marker outside a section; an argument marker outside "
        "a call header; a section begin inside a section) is dropped, never "
        "text."
    ),
    "STRUCT.text-after-section": (
        "Text after a section end is content, appended to the text before it."
    ),
    "STRUCT.several-sections": (
        "Several sections in one message are all parsed; call indexes continue across them."
    ),
    "STRUCT.singular-section-markers": (
        "`<|tool_call_section_begin|>` and "
        "`<|tool_call_section_end|>` are accepted as section "
        "markers."
    ),
    "STRUCT.partial-marker-at-end": (
        "A marker prefix at the very end of the output is literal text of the state it is in."
    ),
    # End of message
    "END.im-end": (
        "`<|im_end|>` ends the message wherever it stands, even inside a JSON string (it "
        "is the end-of-turn token: an engine stops generating there and never passes it "
        "on); anything after it is ignored."
    ),
    # Request
    "REQUEST.tool-choice-none": (
        'With `tool_choice: "none"` and tools declared, a section the model writes anyway '
        "is parsed as always and its calls are withheld: no tool call, and none of the "
        "section's text in content (OpenAI: none means no call; no markup leaks)."
    ),
    "REQUEST.force-nonempty-content": (
        "With `chat_template_kwargs.force_nonempty_content` (an SGLang request option), a reply "
        "that is only reasoning, with no content and no tool-call section, gives that reasoning "
        "as its content; streamed, the reasoning is held back until the reply shows content or "
        "a section (then it is sent as reasoning) or ends (then it is sent as content)."
    ),
    "REQUEST.continue-final-message": (
        "With `continue_final_message` and the conversation ending in an assistant message, "
        "the reply goes on from that message: its text is read first, as the start of the "
        "reply (an open `<think>` in it leaves the reply in reasoning, a closed one in "
        "content), and the reply's fields are what comes after it."
    ),
    # Reasoning
    "THINK.off": "With thinking off, `<think>` and `</think>` are ordinary content.",
    "THINK.leading-open-tag": (
        "With thinking on, the output is reasoning from its start; a leading `<think>` is dropped."
    ),
    "THINK.end": "With thinking on, `</think>` ends the reasoning; what follows is content.",
    "THINK.implicit-end-at-section": (
        "With thinking on, a tool-call section (or a call begin) ends "
        "the reasoning implicitly, so calls inside an unclosed think "
        "block are still calls."
    ),
    "THINK.unterminated": (
        "With thinking on and no end of reasoning, the whole output is reasoning."
    ),
}
