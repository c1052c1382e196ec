"""The collected Anthropic Messages response: the parts of a run folded into one ``message``, the
same parts the stream writes as events (so the two cannot tell different stories)."""

from __future__ import annotations

import json

from duet.agents import ToolCall

from duet.api._errors import APIError
from duet.api._wire import WireFinishReason
from duet.api.messages._protocol import (
    STOP_REASONS,
    ContentBlock,
    Message,
    MessageUsage,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    thinking_signature,
    tool_input_json,
)


class MessageFold:
    """A :class:`duet.api._rendering.ResponseWriter` that keeps the parts; :meth:`result` is the
    ``message`` they make, or the error that ended the run."""

    def __init__(self, message_id: str, model: str) -> None:
        self._id = message_id
        self._model = model
        self._blocks: list[ContentBlock] = []
        self._open: type[ThinkingBlock] | type[TextBlock] | None = None  # the block the texts belong to
        self._texts: list[str] = []
        self._message: Message | None = None
        self._error: APIError | None = None

    def result(self) -> Message | APIError:
        if self._error is not None:
            return self._error
        if self._message is None:  # every run ends with Finished or Failed: this is a bug
            return APIError(500, "the duet ended without finishing", type="server_error", code="internal_error")
        return self._message

    def start(self) -> None:
        pass

    def reasoning(self, text: str) -> None:
        self._add(ThinkingBlock, text)

    def content(self, text: str) -> None:
        self._add(TextBlock, text)

    def tool_call(self, index: int, call: ToolCall) -> None:
        self._close_block()
        self._blocks.append(ToolUseBlock(id=call.id, name=call.name, input=json.loads(tool_input_json(call.arguments))))

    def function_call(self, call: ToolCall) -> None:  # legacy OpenAI functions: not a Messages client's
        self.tool_call(0, call)

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        self._close_block()
        self._message = Message(id=self._id, model=self._model, content=self._blocks, stop_reason=STOP_REASONS[reason],
                                usage=MessageUsage.of(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens))

    def error(self, error: APIError) -> None:
        self._error = error

    def _add(self, kind: type[ThinkingBlock] | type[TextBlock], text: str) -> None:
        if self._open is not kind:
            self._close_block()
            self._open = kind
        self._texts.append(text)

    def _close_block(self) -> None:
        if self._open is None:
            return
        text = "".join(self._texts)
        self._texts = []
        if self._open is ThinkingBlock:
            self._blocks.append(ThinkingBlock(thinking=text, signature=thinking_signature(self._id)))
        else:
            self._blocks.append(TextBlock(text=text))
        self._open = None
