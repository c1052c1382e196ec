"""OpenAI chat messages → AutoGen ``LLMMessage`` objects (and the helpers the agents need on them).

The conversion is forgiving where real clients are sloppy and strict where a model would fail:

- assistant content may carry ``<think>`` blocks (Dify sends reasoning back that way): stripped;
- ``role: tool`` results without ``name`` are matched to their call by ``tool_call_id``;
- tool-call ids nobody here issued are fine: calls and results only need to agree;
- legacy ``function_call`` / ``role: function`` turns become ordinary tool calls and results;
- a call without a result, or a result without a call, is repaired rather than sent to a
  model that would reject the whole request;
- tool names a model cannot use get the same alias the request's tools get.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence  # isinstance against typing's aliases costs a Python-level check
from typing import Any, Literal

from autogen_core import FunctionCall, Image
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)

from duet.workbenches import model_safe_name

from duet._errors import DuetError

from duet.agents._model_reasoning import ReasonedAssistantMessage, sent_reasoning
from duet.agents._options import CacheMark
from duet.agents._thinking import strip_think_blocks, think_text

MISSING_RESULT = "(the client sent no result for this call)"

# The validators behind UserMessage(...) and co., called directly (the model's __init__ adds a Python frame per message).
_new_user = UserMessage.__pydantic_validator__.validate_python
_new_assistant = AssistantMessage.__pydantic_validator__.validate_python
_new_system = SystemMessage.__pydantic_validator__.validate_python
# Each message keeps pydantic's set of the fields it was given (216 bytes) for as long as the stream
# lasts; every plain message of a role is given the same ones: one set of them serves all (as
# duet._fields_set shares them; set with a C call, no Python frame per message).
_share_fields = object.__setattr__
_CONTENT_AND_SOURCE = {"content", "source"}  # a plain user or assistant message's
_CONTENT = {"content"}  # a plain system message's


class ConversationError(DuetError, ValueError):
    """A message the duet cannot use; ``param`` points at it (``messages[2].content``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class ImageURL(Image):
    """An image part kept as the client sent it (an ``https:`` or ``data:`` URL).

    AutoGen's ``Image`` decodes every picture into PIL and re-encodes it as PNG whenever it is
    serialised; a gateway only needs to pass the URL on.
    """

    def __init__(self, url: str, detail: Literal["auto", "low", "high"] = "auto") -> None:
        self.url = url
        self.detail = detail

    def to_openai_format(self, detail: Literal["auto", "low", "high"] | None = None) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.url, "detail": detail or self.detail}}

    @property
    def data_uri(self) -> str:
        return self.url

    def to_base64(self) -> str:
        return self.url.split(",", 1)[1] if self.url.startswith("data:") else self.url

    def __repr__(self) -> str:
        return f"ImageURL({self.url[:60]!r})"


DUET_CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")
"""The form of the tool-call ids Duet issues."""


def new_call_id() -> str:
    """A tool call's id as Duet issues it (:data:`DUET_CALL_ID`): 24 random hex digits, the OS's bytes
    without ``uuid4``'s object around them (a call id keys the hidden part of its round in the store).

    >>> bool(DUET_CALL_ID.match(new_call_id())), new_call_id() != new_call_id()
    (True, True)
    """
    return "call_" + os.urandom(12).hex()


def _text(content: Any, param: str) -> str:
    """Text of a content field that may be a string, ``None`` or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ConversationError("only text parts are allowed here", f"{param}[{i}]")
        return "".join(texts)
    raise ConversationError("content must be a string or a list of content parts", param)


def _user_content(content: Any, param: str) -> str | list[str | Image]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise ConversationError("user content must be a string or a non-empty list of content parts", param)
    parts: list[str | Image] = []
    for i, part in enumerate(content):
        part_param = f"{param}[{i}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str) or not url:
                raise ConversationError("image_url needs a url", f"{part_param}.image_url")
            detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
            parts.append(ImageURL(url, detail if detail in ("auto", "low", "high") else "auto"))  # type: ignore[arg-type]  # narrowed by the test
        else:
            raise ConversationError(f"unsupported content part type {kind!r}", f"{part_param}.type")
    return parts


def _arguments(value: Any, param: str) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):  # lenient: some clients send the object itself
        return json.dumps(value, ensure_ascii=False)
    raise ConversationError("arguments must be a JSON string", param)


def _calls(message: Mapping[str, Any], param: str) -> list[FunctionCall]:
    calls: list[FunctionCall] = []
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise ConversationError("tool_calls must be a list", f"{param}.tool_calls")
    ids: set[str] = set()
    for i, call in enumerate(tool_calls or []):
        call_param = f"{param}.tool_calls[{i}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ConversationError("a tool call needs function.name", call_param)
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise ConversationError("a tool call id must be a string", f"{call_param}.id")
        if call.get("type", "function") != "function":
            raise ConversationError("a tool call's type must be 'function'", f"{call_param}.type")
        if call_id in ids:  # their results could not be told apart
            raise ConversationError(f"two tool calls share the id '{call_id[:64]}'", f"{call_param}.id")
        if call_id:
            ids.add(call_id)
        calls.append(
            FunctionCall(
                id=call_id or new_call_id(),
                name=model_safe_name(function["name"]),
                arguments=_arguments(function.get("arguments"), f"{call_param}.function.arguments"),
            )
        )
    legacy = message.get("function_call")
    if legacy is not None:
        if not isinstance(legacy, Mapping) or not isinstance(legacy.get("name"), str) or not legacy["name"]:
            raise ConversationError("a function_call needs a name", f"{param}.function_call")
        arguments = _arguments(legacy.get("arguments"), f"{param}.function_call.arguments")
        calls.append(FunctionCall(id=new_call_id(), name=model_safe_name(legacy["name"]), arguments=arguments))
    return calls


def conversation_from_openai(messages: Sequence[Mapping[str, Any]]) -> list[LLMMessage]:
    """Converts an OpenAI ``messages`` list. Raises :class:`ConversationError` for unusable input.

    >>> [type(m).__name__ for m in conversation_from_openai([
    ...     {"role": "system", "content": "Be brief."},
    ...     {"role": "user", "content": "Hi"},
    ...     {"role": "assistant", "content": "<think>greet</think>Hello!"}])]
    ['SystemMessage', 'UserMessage', 'AssistantMessage']
    >>> conversation_from_openai([{"role": "assistant", "content": "<think>greet</think>Hello!"}])[0].content
    'Hello!'
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise ConversationError("messages must be a non-empty list", "messages")
    result: list[LLMMessage] = []
    tool_turn = _ToolTurn(result)
    pending, results = tool_turn.pending, tool_turn.results  # changed in place: read here for the plain turns
    for index, message in enumerate(messages):
        if type(message) is not dict and not isinstance(message, Mapping):
            raise ConversationError("each message must be an object", f"messages[{index}]")
        role = message.get("role")
        content = message.get("content")
        if type(content) is str and not pending and not results:
            # Most of a long history: plain text of the three common roles, built without the checks
            # (and the error paths) that other content needs.
            plain: LLMMessage | None = None
            if role == "user":
                plain, given = _new_user({"content": content, "source": "user"}), _CONTENT_AND_SOURCE
            elif role == "assistant" and "tool_calls" not in message and "function_call" not in message:
                plain, given = _new_assistant({"content": strip_think_blocks(content), "source": "assistant"}), _CONTENT_AND_SOURCE
            elif role == "system" or role == "developer":
                plain, given = _new_system({"content": content}), _CONTENT
            if plain is not None:
                _share_fields(plain, "__pydantic_fields_set__", given)
                result.append(plain)
                continue
        if role in ("tool", "function"):
            tool_turn.add_result(message, role, f"messages[{index}]")
        else:
            tool_turn.close()
            result.append(_turn(message, role, f"messages[{index}]", pending))
    tool_turn.close()
    return result


_JOINED_ROLES = {"system": "system", "developer": "system", "assistant": "assistant", "tool": "tool"}
"""Roles whose text parts :func:`conversation_from_openai` joins into one text (as the mark's role)."""


def cache_marks_from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[CacheMark, ...]:
    """The ``cache_control`` marks on the content parts of OpenAI ``messages`` (OpenRouter's way of
    sending Anthropic's marks), each where :func:`conversation_from_openai` puts the end of its part: in
    the joined text of a system, assistant or tool message, or, in a user message (whose parts are kept),
    the part's own text. A mark on an image part is dropped. Read after the conversation was converted.

    >>> cache_marks_from_openai([{"role": "system", "content": [{"type": "text", "text": "Be brief. "},
    ...     {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}]}])[0].text
    'Be brief. Use tools.'
    """
    marks: list[CacheMark] = []
    for message in messages:
        content = message.get("content")
        if type(content) is str or not isinstance(content, list):
            continue
        role = message.get("role")
        texts: list[str] = []
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) and part.get("type") == "text" else None
            if isinstance(text, str):
                texts.append(text)
            control = part.get("cache_control") if isinstance(part, Mapping) else None
            if not isinstance(control, Mapping) or not isinstance(text, str):
                continue
            anchor = "".join(texts) if role in _JOINED_ROLES else text
            if anchor and (role in _JOINED_ROLES or role == "user"):
                marks.append(CacheMark(role=_JOINED_ROLES.get(str(role), "user"), text=anchor, control=dict(control)))
    return tuple(marks)


class _ToolTurn:
    """The tool calls of the latest assistant turn still waiting for a result, and the results so far;
    closed (:meth:`close`) when another turn begins, into one results message."""

    __slots__ = ("out", "pending", "results")

    def __init__(self, out: list[LLMMessage]) -> None:
        self.out = out
        self.pending: dict[str, FunctionCall] = {}
        self.results: list[FunctionExecutionResult] = []

    def add_result(self, message: Mapping[str, Any], role: str, param: str) -> None:
        """A ``tool`` message (or a legacy ``function`` one, which answers the latest call in order: its
        ``name`` may be anything); a result for a call that is not in the history is kept as plain text."""
        content = _text(message.get("content"), f"{param}.content")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ConversationError("a tool message needs tool_call_id", f"{param}.tool_call_id")
        else:
            call_id = next(iter(self.pending), "")
        call = self.pending.pop(call_id, None)
        if call is None:
            self.close()
            name = message.get("name") or "a tool"
            self.out.append(UserMessage(content=f"Result of {name}:\n{content}", source="user"))
            return
        self.results.append(FunctionExecutionResult(content=content, call_id=call.id, name=call.name, is_error=False))

    def close(self) -> None:
        """Ends the tool turn: a call the client sent no result for fails (the model must see one)."""
        if self.pending:
            self.results.extend(
                FunctionExecutionResult(content=MISSING_RESULT, call_id=call.id, name=call.name, is_error=True)
                for call in self.pending.values()
            )
            self.pending.clear()
        if self.results:
            self.out.append(FunctionExecutionResultMessage(content=list(self.results)))
            self.results.clear()


def _turn(message: Mapping[str, Any], role: Any, param: str, pending: dict[str, FunctionCall]) -> LLMMessage:
    """A system, user or assistant message, checked; an assistant's tool calls become ``pending``."""
    if role in ("system", "developer"):
        return SystemMessage(content=_text(message.get("content"), f"{param}.content"))
    if role == "user":
        return UserMessage(content=_user_content(message.get("content"), f"{param}.content"), source="user")
    if role != "assistant":
        raise ConversationError(f"unknown role {role!r}", f"{param}.role")
    raw = _text(message.get("content"), f"{param}.content")
    text = strip_think_blocks(raw)
    calls = _calls(message, param) if "tool_calls" in message or "function_call" in message else []
    if not calls:
        return AssistantMessage(content=text, source="assistant")
    pending.update((call.id, call) for call in calls)
    # The model's reasoning on a tool turn, as far as the client sent it back (used when the stored
    # round is gone: see duet.agents._model_reasoning).
    reasoning = sent_reasoning(message, think_text(raw))
    if reasoning is not None:
        return ReasonedAssistantMessage(content=calls, thought=text or None, source="assistant", reasoning=reasoning)
    return AssistantMessage(content=calls, thought=text or None, source="assistant")


def ends_with_tool_results(conversation: Sequence[LLMMessage]) -> bool:
    """True when the newest turn only brings tool results (a follow-up round of a tool loop)."""
    return bool(conversation) and isinstance(conversation[-1], FunctionExecutionResultMessage)


def last_user_text(conversation: Sequence[LLMMessage]) -> str:
    for message in reversed(conversation):
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                return message.content
            return " ".join(part for part in message.content if isinstance(part, str))
    return ""


def without_images(conversation: Sequence[LLMMessage]) -> list[LLMMessage]:
    """The conversation for a model without vision: each image becomes a short note."""
    out = list(conversation)
    for index, message in enumerate(out):
        # A text turn (nearly all of them) is passed over by its content's class, before isinstance.
        if message.content.__class__ is not str and isinstance(message, UserMessage) \
                and any(isinstance(part, Image) for part in message.content):
            text = "\n".join(part if isinstance(part, str) else "[image omitted]" for part in message.content)
            out[index] = UserMessage(content=text, source=message.source)
    return out


def as_transcript(conversation: Sequence[LLMMessage]) -> list[LLMMessage]:
    """The conversation with tool calls and results written out as text, consecutive turns of
    one role merged: what a reasoning model without tool support (DeepSeek-R1) accepts. A turn
    that stays as it was is the same message object (a long plain history is not rebuilt).

    >>> conversation = conversation_from_openai([{"role": "user", "content": "Hi"}, {"role": "user", "content": "Anyone?"},
    ...                                          {"role": "assistant", "content": "Hello!"}])
    >>> [(m.source, m.content) for m in as_transcript(conversation)]
    [('user', 'Hi\\n\\nAnyone?'), ('assistant', 'Hello!')]
    >>> as_transcript(conversation)[1] is conversation[2]
    True
    """
    out: list[LLMMessage] = []
    run_role = ""
    run: list[str] = []  # the texts of the current run of one role, joined once when it ends
    run_message: LLMMessage | None = None  # the run's only message, when it can stand as it is

    def end_run() -> None:
        if len(run) == 1 and run_message is not None:
            out.append(run_message)
        elif run:
            text = "\n\n".join(run)
            out.append(UserMessage(content=text, source="user") if run_role == "user"
                       else AssistantMessage(content=text, source="assistant"))
        run.clear()

    def add(role: str, text: str, unchanged: LLMMessage | None = None) -> None:
        nonlocal run_role, run_message
        if not text:
            return
        if role != run_role:
            end_run()
            run_role = role
        run_message = unchanged if not run else None
        run.append(text)

    for message in without_images(conversation):  # the commonest kinds first: a long history is mostly text turns
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                add("user", message.content, message if message.source == "user" else None)
            else:
                add("user", "\n".join(map(str, message.content)))
        elif isinstance(message, AssistantMessage):
            if isinstance(message.content, str):
                plain = message.source == "assistant" and message.thought is None
                add("assistant", message.content, message if plain else None)
            else:
                lines = [message.thought] if message.thought else []
                lines += [f"[called tool {call.name} with {call.arguments}]" for call in message.content]
                add("assistant", "\n".join(lines))
        elif isinstance(message, SystemMessage):
            end_run()
            run_role = ""
            out.append(message)
        elif isinstance(message, FunctionExecutionResultMessage):
            add("user", "\n\n".join(f"[tool {r.name} returned]\n{r.content}" for r in message.content))
    end_run()
    return out
