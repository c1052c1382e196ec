"""The collected Chat Completions response: the parts of a run folded into one ``chat.completion``,
the same parts the stream writes as chunks (so the two cannot tell different stories)."""

from __future__ import annotations

from duet.agents import ToolCall

from duet.api._errors import APIError
from duet.api._wire import WireFinishReason
from duet.api.chat._protocol import CalledFunction, ChatCompletion, ChatCompletionMessage, ChatCompletionMessageToolCall, Choice, CompletionUsage


class CompletionFold:
    """A :class:`duet.api._rendering.ResponseWriter` that keeps the parts; :meth:`result` is the
    ``chat.completion`` they make, or the error that ended the run."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self._id = completion_id
        self._created = created
        self._model = model
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._tool_calls: list[ChatCompletionMessageToolCall] = []
        self._function_call: CalledFunction | None = None
        self._completion: ChatCompletion | None = None
        self._error: APIError | None = None

    def result(self) -> ChatCompletion | APIError:
        if self._error is not None:
            return self._error
        if self._completion is None:  # every run ends with Finished or Failed: this is a bug
            return APIError(500, "the duet ended without finishing", type="server_error", code="internal_error")
        return self._completion

    def start(self) -> None:
        pass

    def reasoning(self, text: str) -> None:
        self._reasoning.append(text)

    def content(self, text: str) -> None:
        self._content.append(text)

    def tool_call(self, index: int, call: ToolCall) -> None:
        self._tool_calls.append(ChatCompletionMessageToolCall(id=call.id, function=CalledFunction(name=call.name, arguments=call.arguments)))

    def function_call(self, call: ToolCall) -> None:
        self._function_call = CalledFunction(name=call.name, arguments=call.arguments)

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        calls = bool(self._tool_calls or self._function_call)
        message = ChatCompletionMessage(
            content="".join(self._content) or (None if calls else ""),  # a message of only calls has null content
            reasoning_content="".join(self._reasoning) or None,
            tool_calls=self._tool_calls or None,
            function_call=self._function_call,
        )
        self._completion = ChatCompletion(
            id=self._id,
            created=self._created,
            model=self._model,
            choices=[Choice(message=message, finish_reason=reason)],
            usage=CompletionUsage.of(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens),
        )

    def error(self, error: APIError) -> None:
        self._error = error
