"""AutoGen's own ``OpenAIChatCompletionClient`` pointed at Duet: Duet as the model of an AutoGen app."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    ModelFamily,
    UserMessage,
)
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream


def client_for(duet: DuetServer, model: str = "duet") -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model=model,
        base_url=f"{duet.base_url}/v1",
        api_key=API_KEY,
        model_info={"vision": False, "function_calling": True, "json_output": True, "family": ModelFamily.R1, "structured_output": False},
    )


async def lookup_order(order_id: str) -> str:
    """Finds an order."""
    return f"order {order_id}"


LOOKUP = FunctionTool(lookup_order, description="Finds an order by id.")


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_create_returns_answer_and_reasoning(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["check ", "the order"]))
    upstream.script(ANSWER, Reply(content=["It shipped."]))

    async def main() -> CreateResult:
        client = client_for(duet)
        try:
            return await client.create([UserMessage(content="Where is my order?", source="user")])
        finally:
            await client.close()

    result = run(main())
    assert result.content == "It shipped."
    assert result.thought == "check the order"
    assert result.finish_reason == "stop"
    assert result.usage.completion_tokens == 2 + 1


def test_create_stream_with_tools_and_the_follow_up(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup_order", '{"order_id": "A7"}')]))

    async def main() -> tuple[list[str], CreateResult, CreateResult]:
        client = client_for(duet)
        try:
            pieces: list[str] = []
            first: CreateResult | None = None
            async for item in client.create_stream([UserMessage(content="Order A7?", source="user")], tools=[LOOKUP]):
                if isinstance(item, CreateResult):
                    first = item
                else:
                    pieces.append(item)
            assert first is not None and isinstance(first.content, list)
            call = first.content[0]
            result = await call_tool(call)
            upstream.script(ANSWER, lambda body: Reply(content=[f"Done: {body['messages'][-1]['content']}"]))
            second = await client.create(
                [
                    UserMessage(content="Order A7?", source="user"),
                    AssistantMessage(content=[call], source="assistant"),
                    FunctionExecutionResultMessage(content=[result]),
                ],
                tools=[LOOKUP],
            )
            return pieces, first, second
        finally:
            await client.close()

    async def call_tool(call: FunctionCall) -> FunctionExecutionResult:
        output = await LOOKUP.run_json(json.loads(call.arguments), cancellation_token=None)  # type: ignore[arg-type]
        return FunctionExecutionResult(content=LOOKUP.return_value_as_string(output), call_id=call.id, name=call.name)

    pieces, first, second = run(main())
    assert "".join(pieces).startswith("<think>")  # reasoning streamed the stock client's way
    assert first.finish_reason == "function_calls"
    assert [(c.name, json.loads(c.arguments)) for c in first.content] == [("lookup_order", {"order_id": "A7"})]  # type: ignore[union-attr]
    assert second.content == "Done: order A7"
    sent_tools = upstream.requests_for(ANSWER)[0].body["tools"]
    assert sent_tools[0]["function"]["name"] == "lookup_order"
    assert sent_tools[0]["function"]["parameters"] == LOOKUP.schema["parameters"]
