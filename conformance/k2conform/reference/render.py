"""The reference renderer: messages + tools → the Kimi K2 prompt stream, byte for byte.

It follows the format document (``<|im_{class}|>{name}<|im_middle|>{body}<|im_end|>``,
the ``tool_declare`` turn first, the default system prompt, tool results under
``## Return of {id}``) and, where the document is silent, what the official chat
template produces when transformers renders it; each such choice is in
``RENDER_POLICIES``.  ``render_with_template`` renders a user-supplied
``chat_template.jinja`` the way transformers does, so a real template can be checked
against the same golden streams.
"""

from __future__ import annotations

import json
import re
import traceback
from typing import Any, Mapping, Sequence

from k2conform import markers
from k2conform.errors import UsageError

DEFAULT_SYSTEM_PROMPT = "You are Kimi, an AI assistant created by Moonshot AI."
MEDIA_PLACEHOLDER = "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"

RENDER_POLICIES: dict[str, str] = {
    "RENDER.tools-compact-json": "The tools array is JSON with separators (',', ':'), keys in the "
    "given order, non-ASCII unescaped.",
    "RENDER.default-system-newline": "The injected default system turn is followed by one newline "
    "(the official template's `{% endif %}` under transformers' "
    "trim_blocks).",
    "RENDER.arguments-verbatim": "String arguments are written verbatim; object arguments as JSON "
    "with ', ' and ': ' separators.",
    "RENDER.role-name": "A turn's name is the message's `name`, else its role (`tool` for tool "
    "results).",
    "RENDER.image-part": "An image content part renders as the media placeholder followed by a "
    "newline.",
}


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    add_generation_prompt: bool = False,
) -> str:
    """The prompt stream for a conversation, as the spec defines it."""
    out: list[str] = []
    if tools:
        declared = json.dumps(list(tools), separators=(",", ":"), ensure_ascii=False)
        out.append(_turn(markers.IM_SYSTEM, "tool_declare", declared))
    if not messages or messages[0].get("role") != "system":
        out.append(_turn(markers.IM_SYSTEM, "system", DEFAULT_SYSTEM_PROMPT) + "\n")
    for message in messages:
        out.append(render_message(message))
    if add_generation_prompt:
        out.append(f"{markers.IM_ASSISTANT}assistant{markers.IM_MIDDLE}")
    return "".join(out)


def render_message(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    name = message.get("name") or role
    if role == "user":
        return _turn(markers.IM_USER, name, render_content(message.get("content")))
    if role == "assistant":
        body = render_content(message.get("content")) + render_tool_calls(
            message.get("tool_calls") or ()
        )
        return _turn(markers.IM_ASSISTANT, name, body)
    if role == "tool":
        body = (
            f"## Return of {message.get('tool_call_id')}\n{render_content(message.get('content'))}"
        )
        return _turn(markers.IM_SYSTEM, message.get("name") or "tool", body)
    return _turn(markers.IM_SYSTEM, name, render_content(message.get("content")))


def render_tool_calls(tool_calls: Sequence[Mapping[str, Any]]) -> str:
    """An assistant's tool calls as the model writes them (also the model output they stand for)."""
    if not tool_calls:
        return ""
    calls = []
    for call in tool_calls:
        arguments = call["function"]["arguments"]
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            f"{markers.CALL_BEGIN}{call['id']}{markers.ARGUMENT_BEGIN}{arguments}{markers.CALL_END}"
        )
    return f"{markers.SECTION_BEGIN}{''.join(calls)}{markers.SECTION_END}"


def render_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") == "image" or "image" in part or "image_url" in part:
            parts.append(MEDIA_PLACEHOLDER + "\n")
        else:
            parts.append(part.get("text", ""))
    return "".join(parts)


def _turn(marker: str, name: str, body: str) -> str:
    return f"{marker}{name}{markers.IM_MIDDLE}{body}{markers.IM_END}"


def render_with_template(
    template_source: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    add_generation_prompt: bool = False,
    template_name: str = "the chat template",
    **kwargs: Any,
) -> str:
    """Render a chat template the way transformers' ``apply_chat_template`` does.  The template
    is the user's input: one that does not compile, or fails while rendering, is a
    :class:`UsageError` naming ``template_name`` and the template's line."""
    import jinja2

    try:
        return _render_template(template_source, messages, tools, add_generation_prompt, **kwargs)
    except jinja2.TemplateSyntaxError as error:
        raise UsageError(f"{template_name}: line {error.lineno}: {error.message}") from None
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, ArithmeticError) as error:
        line = next(
            (
                f.lineno
                for f in reversed(traceback.extract_tb(error.__traceback__))
                if f.filename == "<template>"
            ),
            None,
        )
        where = f"line {line}: " if line else ""
        detail = " ".join(str(error).split())  # one line
        if isinstance(error, jinja2.exceptions.SecurityError):
            raise UsageError(f"{template_name}: {where}{_sandbox_refusal(detail)}") from None
        raise UsageError(f"{template_name}: {where}{type(error).__name__}: {detail}") from None


_UNSAFE_ATTRIBUTE = re.compile(r"access to attribute '(\w+)' of '(\w+)' object is unsafe")


def _sandbox_refusal(detail: str) -> str:
    """What a template attempted that transformers' immutable sandbox refuses (``list.append``
    in llama.cpp's Kimi templates): the same refusal a real server's renderer gives."""
    sandbox = "the immutable sandbox transformers renders chat templates in"
    attempted = _UNSAFE_ATTRIBUTE.search(detail)
    if attempted:
        method = f"{attempted[2]}.{attempted[1]}"
        return f"the template calls {method}, which {sandbox} refuses (jinja2 SecurityError)"
    return f"{sandbox} refuses what the template attempted: {detail} (jinja2 SecurityError)"


def _render_template(
    template_source: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool,
    **kwargs: Any,
) -> str:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(template_source)
    return template.render(
        messages=list(messages),
        tools=list(tools) or None,
        add_generation_prompt=add_generation_prompt,
        bos_token=markers.BOS,
        eos_token=markers.EOS,
        **kwargs,
    )
