"""The ``cache_control`` marks of a Messages request (Claude Code puts them on its system prompt, its
latest messages' last blocks and its tools) as :class:`~duet.agents.CacheMark` objects: the end of
the marked block in the text :mod:`duet.api.messages._reader` makes of its message (system blocks
joined by a blank line, a user turn's or an assistant turn's text blocks joined as they are, a
``tool_result`` as one tool message). A mark on an image, or on an assistant turn without text (its
tool calls only), has no text to end: it is dropped. Read after the request was checked, so every
block here is a well-formed one.
"""

from __future__ import annotations

from typing import Any, Literal

from duet.agents import CacheMark
from duet.workbenches import model_safe_name

from duet.api.messages._protocol import MessagesRequest
from duet.api.messages._reader import ERROR_PREFIX, tool_result_text

MarkRole = Literal["system", "user", "assistant", "tool"]


def cache_marks(request: MessagesRequest) -> tuple[CacheMark, ...]:
    """Every mark of ``request``: on ``system``, on the messages' blocks, on the tools."""
    marks: list[CacheMark] = []
    if isinstance(request.system, list):
        marks += _joined_marks(request.system, "system", "\n\n")
    for message in request.messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        role = message.get("role")
        if role == "user":
            marks += _user_marks(content)
        elif role in ("assistant", "system"):
            marks += _joined_marks(content, role, "" if role == "assistant" else "\n\n")
    for tool in request.tools or []:
        if tool.cache_control and tool.input_schema is not None:
            marks.append(CacheMark(role="tools", text=model_safe_name(tool.name), control=tool.cache_control))
    return tuple(marks)


def _joined_marks(blocks: list[dict[str, Any]], role: MarkRole, separator: str) -> list[CacheMark]:
    """Marks on text blocks that the reader joins with ``separator`` (an assistant's tool_use blocks end its text)."""
    marks: list[CacheMark] = []
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        control = block.get("cache_control")
        if isinstance(control, dict) and kind in ("text", "tool_use") and texts:
            marks.append(CacheMark(role=role, text=separator.join(texts), control=control))
    return [mark for mark in marks if mark.text]


def _user_marks(blocks: list[dict[str, Any]]) -> list[CacheMark]:
    """A user turn: each tool_result is a tool message of its own; its text blocks are one user message
    (joined when it holds only text, else its parts)."""
    only_text = not any(_has_image(block) for block in blocks)  # as the reader decides to join the turn's text
    marks: list[CacheMark] = []
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        control = block.get("cache_control")
        if kind == "text":
            texts.append(block["text"])
        if not isinstance(control, dict):
            continue
        if kind == "tool_result":
            text = tool_result_text(block)
            text = f"{ERROR_PREFIX}{text}" if block.get("is_error") is True else text
            if text:
                marks.append(CacheMark(role="tool", text=text, control=control))
        elif kind == "text" and block["text"]:
            marks.append(CacheMark(role="user", text="".join(texts) if only_text else block["text"], control=control))
    return marks


def _has_image(block: dict[str, Any]) -> bool:
    """An image block, or a tool_result holding one (its images join the user turn's parts)."""
    if block.get("type") == "image":
        return True
    content = block.get("content") if block.get("type") == "tool_result" else None
    return isinstance(content, list) and any(isinstance(item, dict) and item.get("type") == "image" for item in content)
