"""The parts of a run (:class:`~duet.api._rendering.Renderer`) as a Responses API answer: one
``response`` object (:class:`ResponseFold`), or the stream of events that builds it
(:class:`ResponseStreamWriter`: the same fold, which also writes each step as an event).

Output items, in the order the parts come: a ``reasoning`` item for each stretch of reasoning
(its text as one summary part), a ``message`` item for each stretch of answer text (one
``output_text`` part), a ``function_call`` item per client tool call (a ``custom_tool_call`` for a
freeform tool; a namespaced tool is named back with its ``namespace``). Status: ``completed``;
``incomplete`` when the answer model stopped at ``max_output_tokens`` (or a content filter); a
failure before the first byte is the HTTP error, after it ``response.failed``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from duet._wire_json import dumps as _json
from duet.agents import ToolCall, random_id

from duet.api._rendering import Batched
from duet.api._errors import APIError
from duet.api._wire import WireFinishReason
from duet.api.responses._protocol import (
    CustomToolCallItem,
    FunctionCallItem,
    IncompleteDetails,
    MessageItem,
    OutputItem,
    OutputText,
    ReasoningItem,
    Response,
    ResponseError,
    ResponsesRequest,
    ResponseUsage,
    SummaryText,
)
from duet.api.responses._reader import CUSTOM_INPUT, ClientTool




def response_shell(response_id: str, wire: ResponsesRequest, tools: list[dict[str, Any]]) -> Response:
    """The response object before its output: what the request asked for, echoed."""
    choice = wire.tool_choice
    return Response(
        id=response_id,
        created_at=int(time.time()),
        status="in_progress",
        instructions=wire.instructions,
        max_output_tokens=wire.max_output_tokens,
        model=wire.model,
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        previous_response_id=wire.previous_response_id,
        reasoning={"effort": None, "summary": None, **(wire.reasoning or {})},
        store=wire.stored,
        temperature=wire.temperature,
        text={"format": wire.text.format.model_dump(by_alias=True, exclude_none=True)} if wire.text and wire.text.format else {"format": {"type": "text"}},
        tool_choice=(choice.model_dump(exclude_none=True) if choice is not None and not isinstance(choice, str) else choice or "auto"),
        tools=tools,
        top_p=wire.top_p,
        user=wire.user,
        metadata=wire.metadata or {},
    )


class ResponseFold:
    """A :class:`~duet.api._rendering.ResponseWriter` that builds the ``response`` object;
    :meth:`result` is it, or the error that ended the run."""

    def __init__(self, response: Response, client_tools: dict[str, ClientTool]) -> None:
        self.response = response
        self._client_tools = client_tools
        self._open: ReasoningItem | MessageItem | None = None  # the item whose text is still coming
        self._texts: list[str] = []
        self._error: APIError | None = None
        self._finished = False

    # -- what the stream writer adds events to

    def _event(self, kind: str, payload: dict[str, Any]) -> None:
        """A step of the response (written as an event by the stream writer; nothing here)."""

    def _opened(self, item: OutputItem) -> None:
        pass

    def _text_delta(self, text: str) -> None:
        pass

    def _closed(self, item: OutputItem, text: str) -> None:
        pass

    # -- the parts

    @property
    def output_index(self) -> int:
        return len(self.response.output) - 1

    def result(self) -> Response | APIError:
        if self._error is not None:
            return self._error
        if not self._finished:  # every run ends with Finished or Failed: this is a bug
            return APIError(500, "the duet ended without finishing", type="server_error", code="internal_error")
        return self.response

    def start(self) -> None:
        pass

    def reasoning(self, text: str) -> None:
        if not isinstance(self._open, ReasoningItem):
            self._open_item(ReasoningItem(id=f"rs_{random_id()}", summary=[], status="in_progress"))
        self._texts.append(text)
        self._text_delta(text)

    def content(self, text: str) -> None:
        if not isinstance(self._open, MessageItem):
            self._open_item(MessageItem(id=f"msg_{random_id()}", status="in_progress", content=[]))
        self._texts.append(text)
        self._text_delta(text)

    def tool_call(self, index: int, call: ToolCall) -> None:
        self._close("completed")
        client = self._client_tools.get(call.name) or ClientTool("function", call.name)
        item: OutputItem
        if client.kind == "custom":
            item = CustomToolCallItem(id=f"ctc_{random_id()}", status="in_progress", call_id=call.id, name=client.name,
                                      input="", namespace=client.namespace)
        else:
            item = FunctionCallItem(id=f"fc_{random_id()}", status="in_progress", call_id=call.id, name=client.name,
                                    arguments="", namespace=client.namespace)
        self.response.output.append(item)
        self._opened(item)
        text = _custom_input(call.arguments) if isinstance(item, CustomToolCallItem) else call.arguments
        self._text_delta_of(item, text)
        if isinstance(item, CustomToolCallItem):
            item.input = text
        else:
            item.arguments = text
        item.status = "completed"
        self._closed(item, text)

    def function_call(self, call: ToolCall) -> None:  # legacy Chat Completions clients only
        self.tool_call(0, call)

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        incomplete = reason in ("length", "content_filter")
        self._close("incomplete" if incomplete else "completed")
        response = self.response
        response.status = "incomplete" if incomplete else "completed"
        if incomplete:
            response.incomplete_details = IncompleteDetails(reason="max_output_tokens" if reason == "length" else "content_filter")
        response.usage = ResponseUsage.of(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens)
        self._finished = True

    def end(self) -> None:
        """The response is complete and stored (or not: ``store`` says which); a stream writes its last event here."""

    def error(self, error: APIError) -> None:
        if self._open is not None:  # no done event: the item stays as far as it got
            self._set_text(self._open, "".join(self._texts))
            self._open.status = "incomplete"
            self._open = None
        self.response.status = "failed"
        self.response.error = ResponseError(code=error.detail.code or error.detail.type, message=error.detail.message)
        self._error = error

    # -- items

    def _open_item(self, item: ReasoningItem | MessageItem) -> None:
        self._close("completed")
        self.response.output.append(item)
        self._open = item
        self._texts = []
        self._opened(item)

    def _close(self, status: str) -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        text = "".join(self._texts)
        self._texts = []
        self._set_text(item, text)
        item.status = status  # type: ignore[assignment]
        self._closed(item, text)

    @staticmethod
    def _set_text(item: ReasoningItem | MessageItem, text: str) -> None:
        if isinstance(item, ReasoningItem):
            item.summary = [SummaryText(text=text)]
        else:
            item.content = [OutputText(text=text)]

    def _text_delta_of(self, item: OutputItem, text: str) -> None:
        pass


def _custom_input(arguments: str) -> str:
    """A freeform tool's input from the arguments of the function it was offered as."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


class ResponseStreamWriter(Batched, ResponseFold):
    """The streamed answer: every step of the fold as a server-sent event (``event:`` and one
    ``data:`` line, as OpenAI frames them) with a ``sequence_number``, kept until :meth:`take`."""

    def __init__(self, response: Response, client_tools: dict[str, ClientTool]) -> None:
        super().__init__(response, client_tools)
        self._sequence = 0
        self._out: list[bytes] = []
        self._delta_head = b""  # the fixed part of the open item's delta events, before and after the text
        self._delta_tail = b"}\n\n"


    def _event(self, kind: str, payload: dict[str, Any]) -> None:
        data = {"type": kind, "sequence_number": self._sequence, **payload}
        self._sequence += 1
        self._out.append(b"event: " + kind.encode() + b"\ndata: " + _json(data) + b"\n\n")

    def _lifecycle(self, kind: str) -> None:
        self._event(kind, {"response": self.response.model_dump(mode="json")})

    def start(self) -> None:
        self._lifecycle("response.created")
        self._lifecycle("response.in_progress")

    def _opened(self, item: OutputItem) -> None:
        index = self.output_index
        self._event("response.output_item.added", {"output_index": index, "item": item.model_dump(mode="json", exclude_none=True)})
        if isinstance(item, ReasoningItem):
            self._event("response.reasoning_summary_part.added", {"item_id": item.id, "output_index": index, "summary_index": 0,
                                                                  "part": {"type": "summary_text", "text": ""}})
            self._delta_head = self._delta_prefix("response.reasoning_summary_text.delta", item.id, index, b'"summary_index":0,')
            self._delta_tail = b"}\n\n"
        elif isinstance(item, MessageItem):
            self._event("response.content_part.added", {"item_id": item.id, "output_index": index, "content_index": 0,
                                                        "part": OutputText(text="").model_dump(mode="json")})
            self._delta_head = self._delta_prefix("response.output_text.delta", item.id, index, b'"content_index":0,')
            self._delta_tail = b',"logprobs":[]}\n\n'

    @staticmethod
    def _delta_prefix(kind: str, item_id: str, index: int, extra: bytes) -> bytes:
        return (b"event: " + kind.encode() + b'\ndata: {"type":"' + kind.encode() + b'","item_id":' + _json(item_id)
                + b',"output_index":%d,' % index + extra)

    def _text_delta(self, text: str) -> None:
        # The hottest event: its fixed part is made once per item, so a delta costs one dumps of its text.
        self._out.append(self._delta_head + b'"sequence_number":%d,"delta":' % self._sequence + _json(text) + self._delta_tail)
        self._sequence += 1

    def _text_delta_of(self, item: OutputItem, text: str) -> None:
        kind = "response.custom_tool_call_input.delta" if isinstance(item, CustomToolCallItem) else "response.function_call_arguments.delta"
        self._event(kind, {"item_id": item.id, "output_index": self.output_index, "delta": text})

    def _closed(self, item: OutputItem, text: str) -> None:
        index = self.output_index
        if isinstance(item, ReasoningItem):
            self._event("response.reasoning_summary_text.done", {"item_id": item.id, "output_index": index, "summary_index": 0, "text": text})
            self._event("response.reasoning_summary_part.done", {"item_id": item.id, "output_index": index, "summary_index": 0,
                                                                 "part": {"type": "summary_text", "text": text}})
        elif isinstance(item, MessageItem):
            self._event("response.output_text.done", {"item_id": item.id, "output_index": index, "content_index": 0, "text": text,
                                                      "logprobs": []})
            self._event("response.content_part.done", {"item_id": item.id, "output_index": index, "content_index": 0,
                                                       "part": OutputText(text=text).model_dump(mode="json")})
        elif isinstance(item, CustomToolCallItem):
            self._event("response.custom_tool_call_input.done", {"item_id": item.id, "output_index": index, "input": text})
        else:
            self._event("response.function_call_arguments.done", {"item_id": item.id, "output_index": index, "name": item.name,
                                                                  "arguments": text})
        self._event("response.output_item.done", {"output_index": index, "item": item.model_dump(mode="json", exclude_none=True)})

    def end(self) -> None:
        # Written once the response is stored (or could not be): its ``store`` tells the truth.
        if self._finished:
            self._lifecycle("response.incomplete" if self.response.status == "incomplete" else "response.completed")

    def error(self, error: APIError) -> None:
        super().error(error)
        self._lifecycle("response.failed")
