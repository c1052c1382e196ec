"""Dify's client code, run the way Dify runs it: in its own gevent-patched process.

``dify_plugin`` calls ``gevent.monkey.patch_all()`` when it is imported; inside the test process
that would change every socket and thread under the other tests. ``tests/clients/test_dify.py`` therefore
starts ``python -m tests.dify_client`` once and sends it calls as JSON lines on stdin; each answer
is one JSON line on stdout: ``{"result": ...}`` or ``{"error": type, "message": ...}``.
"""

from __future__ import annotations

import dify_plugin  # noqa: F401  (patches the process with gevent first, as in Dify)

import json
import sys
from typing import Any


def _prompt(messages: list[dict[str, Any]]) -> list[Any]:
    from dify_plugin.entities.model.message import (
        AssistantPromptMessage,
        SystemPromptMessage,
        ToolPromptMessage,
        UserPromptMessage,
    )

    prompt: list[Any] = []
    for message in messages:
        role = message["role"]
        if role == "system":
            prompt.append(SystemPromptMessage(content=message["content"]))
        elif role == "user":
            prompt.append(UserPromptMessage(content=message["content"]))
        elif role == "assistant":
            calls = [
                AssistantPromptMessage.ToolCall(
                    id=call["id"], type="function",
                    function=AssistantPromptMessage.ToolCall.ToolCallFunction(name=call["name"], arguments=call["arguments"]),
                )
                for call in message.get("tool_calls", [])
            ]
            prompt.append(AssistantPromptMessage(content=message.get("content", ""), tool_calls=calls))
        elif role == "tool":
            prompt.append(ToolPromptMessage(content=message["content"], tool_call_id=message["tool_call_id"]))
    return prompt


def _tools(tools: list[dict[str, Any]] | None) -> list[Any] | None:
    from dify_plugin.entities.model.message import PromptMessageTool

    return [PromptMessageTool(**tool) for tool in tools] if tools else None


def _model() -> Any:
    from dify_plugin.interfaces.model.openai_compatible.llm import OAICompatLargeLanguageModel

    class OfficialPluginLLM(OAICompatLargeLanguageModel):
        """What Dify's official "OpenAI-API-compatible" plugin adds to the SDK class: it asks for a
        usage chunk when streaming (without one the SDK counts tokens with a tokenizer it downloads)."""

        def _invoke(self, model, credentials, prompt_messages, model_parameters, tools=None, stop=None, stream=True, user=None):  # type: ignore[no-untyped-def]
            if stream:
                model_parameters = {**model_parameters, "stream_options": {"include_usage": True}}
            return super()._invoke(model, credentials, prompt_messages, model_parameters, tools, stop, stream, user)

    return OfficialPluginLLM(model_schemas=[])


def validate(model: str, credentials: dict[str, Any]) -> None:
    """``validate_credentials``: what Dify does when the user presses Save."""
    _model().validate_credentials(model, credentials)


def invoke(
    model: str,
    credentials: dict[str, Any],
    messages: list[dict[str, Any]],
    parameters: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
    stream: bool = True,
    stop: list[str] | None = None,
    user: str | None = None,
    raw: bool = False,
) -> dict[str, Any]:
    """One LLM invocation, accumulated the way Dify's agent runner does. ``raw`` calls ``_invoke``
    with the parameters unfiltered (what the official plugin sends, e.g. ``stream_options``)."""
    from dify_plugin.entities.model.llm import LLMResult

    llm = _model()
    if raw:
        result = llm._invoke(model, credentials, _prompt(messages), parameters, _tools(tools), stop, stream, user)
        chunks = [result.to_llm_result_chunk()] if isinstance(result, LLMResult) else result
    else:
        chunks = llm.invoke(model, credentials, _prompt(messages), parameters, _tools(tools), stop, stream, user)
    text, calls, usage = "", [], None
    for chunk in chunks:
        message = chunk.delta.message
        text += message.content or ""
        calls += [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
        usage = chunk.delta.usage or usage
    return {
        "text": text,
        "tool_calls": calls,
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens} if usage else None,
    }


def main() -> None:
    functions = {"validate": validate, "invoke": invoke}
    for line in sys.stdin:
        call = json.loads(line)
        try:
            answer: dict[str, Any] = {"result": functions[call["function"]](*call["args"], **call["kwargs"])}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            answer = {"error": type(exc).__name__, "message": str(exc)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
