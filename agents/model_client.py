"""A lean AutoGen ``ChatCompletionClient`` for OpenAI-compatible servers.

Why not ``OpenAIChatCompletionClient`` on the hot path: the openai SDK builds a pydantic object
per streamed chunk, which costs ~6.4 ms of CPU for a 40-chunk stream on this project's reference
machine; parsing the same stream as JSON lines over aiohttp costs ~0.5 ms (``bench/``). This
client keeps the stock client's streaming contract exactly — text pieces, reasoning pieces
wrapped in ``<think>``/``</think>``, then one ``CreateResult`` — so agents work with either, and a
team file may name either one. It also fixes two stock bugs the duet would trip over
(``thought`` stripped by characters; reasoning dropped when the model also calls tools).

Example::

    client = OpenAICompatibleClient(model="qwen2.5", base_url="http://localhost:11434/v1")
    async for piece in client.create_stream([UserMessage(content="Hi", source="user")]):
        print(piece)
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, AsyncGenerator, Literal, Mapping, Optional, Sequence, Union

import aiohttp
import yarl
from autogen_core import CancellationToken, Component, FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelCapabilities,  # type: ignore[attr-defined]
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
    validate_model_info,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel, Field
from typing_extensions import Self

from .errors import UpstreamConnectionError, UpstreamProtocolError, UpstreamStatusError, UpstreamTimeout

ANSWER_MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "family": "unknown",
    "structured_output": False,
    "multiple_system_messages": True,
}
"""Default ``model_info`` for a model AutoGen does not know: assume it can call functions."""

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "function_calls",
    "function_call": "function_calls",
    "content_filter": "content_filter",
}


class OpenAICompatibleClientConfig(BaseModel):
    """Serialisable configuration. The API key is never stored: only the name of the
    environment variable that holds it."""

    model: str
    base_url: str
    api_key_env: Optional[str] = None
    model_info: ModelInfo = Field(default_factory=lambda: dict(ANSWER_MODEL_INFO))  # type: ignore[arg-type]
    create_args: dict[str, Any] = Field(
        default_factory=dict, description="Sent with every request (temperature, extra vendor fields, ...)."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float = 10.0
    read_timeout: float = Field(300.0, description="Longest silence allowed between two bytes of the upstream's answer.")
    max_connections: int = Field(0, description="Connection pool size; 0 means unlimited.")


def message_to_openai(message: LLMMessage) -> list[dict[str, Any]]:
    """One AutoGen ``LLMMessage`` as OpenAI chat messages (a tool-result message becomes one per call)."""
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.content}]
    if isinstance(message, UserMessage):
        if isinstance(message.content, str):
            return [{"role": "user", "content": message.content}]
        parts = [
            {"type": "text", "text": part} if isinstance(part, str) else part.to_openai_format()
            for part in message.content
        ]
        return [{"role": "user", "content": parts}]
    if isinstance(message, AssistantMessage):
        if isinstance(message.content, str):
            return [{"role": "assistant", "content": message.content}]
        calls = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.content
        ]
        return [{"role": "assistant", "content": message.thought or None, "tool_calls": calls}]
    if isinstance(message, FunctionExecutionResultMessage):
        return [{"role": "tool", "tool_call_id": result.call_id, "content": result.content} for result in message.content]
    raise TypeError(f"Unsupported message type: {type(message).__name__}")


def tool_to_openai(tool: Tool | ToolSchema) -> dict[str, Any]:
    """An AutoGen tool as an OpenAI ``tools`` entry; ``parameters`` is passed through untouched."""
    schema = tool.schema if isinstance(tool, Tool) else tool
    function: dict[str, Any] = {"name": schema["name"]}
    if "description" in schema:
        function["description"] = schema["description"]
    if "parameters" in schema:
        function["parameters"] = schema["parameters"]
    if "strict" in schema:
        function["strict"] = schema["strict"]
    return {"type": "function", "function": function}


def _tool_choice_to_openai(tool_choice: Tool | str) -> Any:
    if isinstance(tool_choice, str):
        return tool_choice
    return {"type": "function", "function": {"name": tool_choice.schema["name"]}}


async def _sse_data(response: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    """The ``data`` of each server-sent event, read in whatever pieces the socket delivers
    (several events often arrive in one read; a line-by-line reader would await each line)."""
    buffer = b""
    async for received in response.content.iter_any():
        buffer = buffer + received if buffer else received
        held = b""
        if b"\r" in buffer:  # CRLF or CR line ends; a CR at the very end may still pair with an LF
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        yielded_once = False
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            if start and not yielded_once:
                # A burst of events arrived in one read: let other tasks run once, so the first
                # token of the burst is written out before the rest is parsed.
                yielded_once = True
                await asyncio.sleep(0)
            event = buffer[start:end]
            start = end + 2
            if event.startswith(b"data:") and b"\n" not in event:
                yield event[5:].lstrip()
            else:  # comments, ``event:``/``id:`` lines, multi-line data
                lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
                if lines:
                    yield b"\n".join(lines)
        buffer = buffer[start:] + held


def _error_message(status: int, body: bytes) -> str:
    """The upstream's own error message, whatever shape it came in."""
    text = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:2000] or f"HTTP {status}"
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


class _ToolCallBuilder:
    __slots__ = ("id", "name", "arguments")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Mapping[str, Any]) -> None:
        if delta.get("id") and not self.id:
            self.id = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        # Some servers repeat the full name in every delta, others split it: only append new text.
        if name and name != self.name:
            self.name += name
        arguments = function.get("arguments")
        if arguments:
            self.arguments.append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def build(self) -> FunctionCall:
        return FunctionCall(id=self.id, name=self.name, arguments="".join(self.arguments) or "{}")


class OpenAICompatibleClient(ChatCompletionClient, Component[OpenAICompatibleClientConfig]):
    """Streams chat completions from any OpenAI-compatible server (OpenAI, Ollama, vLLM, DeepSeek, ...).

    Args:
        model: the upstream model name.
        base_url: the server's OpenAI base URL, e.g. ``http://localhost:11434/v1``.
        api_key: the key itself (not serialised); defaults to the value of ``api_key_env``.
        api_key_env: name of the environment variable holding the key.
        model_info: AutoGen model capabilities; defaults to :data:`ANSWER_MODEL_INFO`.
        create_args: request fields sent with every call (``temperature``, ``extra_body``, ...).
    """

    component_type = "model"
    component_config_schema = OpenAICompatibleClientConfig
    component_provider_override = "agents.OpenAICompatibleClient"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        model_info: ModelInfo | None = None,
        create_args: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 300.0,
        max_connections: int = 0,
    ) -> None:
        self._config = OpenAICompatibleClientConfig(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            model_info=model_info or dict(ANSWER_MODEL_INFO),  # type: ignore[arg-type]
            create_args=dict(create_args or {}),
            headers=dict(headers or {}),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_connections=max_connections,
        )
        validate_model_info(self._config.model_info)
        key = api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self._config.headers}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._url = yarl.URL(base_url.rstrip("/") + "/chat/completions")  # parsed once, not per request
        extra_body = self._config.create_args.get("extra_body") or {}
        self._default_args = {k: v for k, v in self._config.create_args.items() if k != "extra_body"} | extra_body
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._total_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._actual_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def base_url(self) -> str:
        return self._config.base_url

    def _get_session(self) -> aiohttp.ClientSession:
        """One pooled session per event loop, created on first use (aiohttp needs a running loop)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session_loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._config.max_connections, ttl_dns_cache=300)
            # Model APIs set no cookies worth keeping; a dummy jar skips cookie handling per request.
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar())
            self._session_loop = loop
        return self._session

    def _request_body(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Tool | ToolSchema],
        tool_choice: Tool | str,
        json_output: Optional[bool | type[BaseModel]],
        extra_create_args: Mapping[str, Any],
    ) -> bytes:
        oai_messages: list[dict[str, Any]] = []
        for message in messages:
            oai_messages.extend(message_to_openai(message))
        body: dict[str, Any] = {"model": self._config.model, "messages": oai_messages}
        body.update(self._default_args)
        if extra_create_args:
            extra_body = extra_create_args.get("extra_body")
            body.update(extra_create_args)
            if extra_body:
                del body["extra_body"]
                body.update(extra_body)
        if tools:
            body["tools"] = [tool_to_openai(tool) for tool in tools]
            body["tool_choice"] = _tool_choice_to_openai(tool_choice)
        if json_output is True:
            body["response_format"] = {"type": "json_object"}
        elif isinstance(json_output, type):
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": json_output.__name__, "schema": json_output.model_json_schema()},
            }
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return json.dumps(body, ensure_ascii=False).encode()

    async def _open(self, body: bytes, cancellation_token: CancellationToken | None) -> aiohttp.ClientResponse:
        session = self._get_session()
        for attempt in (1, 2):
            request = asyncio.ensure_future(session.post(self._url, data=body, headers=self._headers))
            if cancellation_token is not None:
                cancellation_token.link_future(request)
            try:
                response = await request
                break
            except asyncio.TimeoutError as exc:
                raise UpstreamTimeout(f"{self._config.model} at {self._url} did not answer in time") from exc
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A pooled keep-alive connection the server closed just as it was reused: one more
                # try, on a fresh connection, as the openai SDK would.
                if attempt == 2:
                    raise UpstreamConnectionError(f"cannot reach {self._config.model} at {self._url}: {exc}") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamConnectionError(f"cannot reach {self._config.model} at {self._url}: {exc}") from exc
        if response.status != 200:
            try:
                raw = await response.read()
            finally:
                response.release()
            message = _error_message(response.status, raw)
            raise UpstreamStatusError(
                f"{self._config.model} at {self._url} answered HTTP {response.status}: {message}",
                upstream_status=response.status,
            )
        return response

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> AsyncGenerator[Union[str, CreateResult], None]:
        if cancellation_token is not None and cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        body = self._request_body(messages, tools, tool_choice, json_output, extra_create_args)
        response = await self._open(body, cancellation_token)
        if cancellation_token is not None:
            # Closing the response aborts a read at once and drops the connection, so the
            # upstream stops generating; no task per chunk is needed.
            cancellation_token.add_callback(response.close)

        content: list[str] = []
        thought: list[str] = []
        calls: dict[int, _ToolCallBuilder] = {}
        finish_reason: str | None = None
        usage: Mapping[str, Any] | None = None
        in_reasoning = False
        done = False
        try:
            async for data in _sse_data(response):
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise UpstreamProtocolError(
                        f"{self._config.model} at {self._url} sent a chunk that is not JSON: {data[:200]!r}"
                    ) from None
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices")
                if not choices:
                    if chunk.get("error"):
                        raise UpstreamStatusError(
                            f"{self._config.model} failed mid-stream: {_error_message(200, data)}"
                        )
                    continue
                choice = choices[0]
                delta = choice.get("delta") or {}
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:
                    thought.append(reasoning)
                    if not in_reasoning:
                        in_reasoning = True
                        reasoning = "<think>" + reasoning
                    yield reasoning
                text = delta.get("content")
                tool_deltas = delta.get("tool_calls")
                if in_reasoning and (text or tool_deltas):
                    in_reasoning = False
                    yield "</think>"
                if text:
                    content.append(text)
                    yield text
                if tool_deltas:
                    for tool_delta in tool_deltas:
                        index = tool_delta.get("index")
                        if index is None:
                            index = len(calls) - 1 if calls and not tool_delta.get("id") else len(calls)
                        builder = calls.get(index)
                        if builder is None:
                            builder = calls[index] = _ToolCallBuilder()
                        builder.add(tool_delta)
        except asyncio.TimeoutError as exc:
            raise UpstreamTimeout(f"{self._config.model} went silent for {self._config.read_timeout:g}s mid-stream") from exc
        except aiohttp.ClientError as exc:
            if cancellation_token is not None and cancellation_token.is_cancelled():
                raise asyncio.CancelledError() from exc
            raise UpstreamConnectionError(f"{self._config.model} at {self._url} broke off the stream: {exc}") from exc
        finally:
            response.release()
        if cancellation_token is not None and cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        if not done and finish_reason is None:
            raise UpstreamConnectionError(f"{self._config.model} at {self._url} ended the stream before the model finished")
        if in_reasoning:
            yield "</think>"

        request_usage = RequestUsage(
            prompt_tokens=int((usage or {}).get("prompt_tokens") or 0),
            completion_tokens=int((usage or {}).get("completion_tokens") or 0),
        )
        self._total_usage = add_usage(self._total_usage, request_usage)
        self._actual_usage = add_usage(self._actual_usage, request_usage)
        text_out = "".join(content)
        reasoning_out = "".join(thought) or None
        if calls:
            yield CreateResult(
                finish_reason="function_calls",
                content=[calls[index].build() for index in sorted(calls)],
                usage=request_usage,
                cached=False,
                thought=text_out or reasoning_out,
            )
        else:
            yield CreateResult(
                finish_reason=_FINISH_REASONS.get(finish_reason or "", "unknown"),  # type: ignore[arg-type]
                content=text_out,
                usage=request_usage,
                cached=False,
                thought=reasoning_out,
            )

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> CreateResult:
        """Same request as :meth:`create_stream`, collected into one result."""
        result: CreateResult | None = None
        async for item in self.create_stream(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            json_output=json_output,
            extra_create_args=extra_create_args,
            cancellation_token=cancellation_token,
        ):
            if isinstance(item, CreateResult):
                result = item
        assert result is not None
        return result

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def actual_usage(self) -> RequestUsage:
        return self._actual_usage

    def total_usage(self) -> RequestUsage:
        return self._total_usage

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        """A rough estimate (4 characters a token): tokenizer files cannot be fetched at run time."""
        size = sum(len(json.dumps(m, default=str)) for message in messages for m in message_to_openai(message))
        size += sum(len(json.dumps(tool_to_openai(tool))) for tool in tools)
        return size // 4

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        return max(0, 128_000 - self.count_tokens(messages, tools=tools))

    @property
    def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
        return self._config.model_info  # type: ignore[return-value]

    @property
    def model_info(self) -> ModelInfo:
        return self._config.model_info

    def _to_config(self) -> OpenAICompatibleClientConfig:
        return self._config.model_copy(deep=True)

    @classmethod
    def _from_config(cls, config: OpenAICompatibleClientConfig) -> Self:
        return cls(**config.model_dump())


def add_usage(a: RequestUsage, b: RequestUsage) -> RequestUsage:
    return RequestUsage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens, completion_tokens=a.completion_tokens + b.completion_tokens
    )
