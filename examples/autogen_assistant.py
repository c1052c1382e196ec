"""Use Duet as the model of an ordinary AutoGen AssistantAgent.

Duet speaks the OpenAI protocol, so AutoGen's OpenAIChatCompletionClient talks to it like to any
model: the reasoning arrives as the result's `thought`, and the agent's tools are client tools for
Duet (the agent runs them; Duet returns the calls and continues from the results).

    DUET_URL=http://127.0.0.1:8000/v1 python examples/autogen_assistant.py "What's the weather in Oslo?"
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import ThoughtEvent, ToolCallExecutionEvent
from autogen_core.models import ModelFamily
from autogen_ext.models.openai import OpenAIChatCompletionClient


async def get_weather(city: str) -> str:
    """Current weather for a city."""
    return json.dumps({"city": city, "temperature_c": 9, "sky": "rain"})


async def main(question: str) -> None:
    client = OpenAIChatCompletionClient(
        model=os.environ.get("DUET_MODEL", "duet"),
        base_url=os.environ.get("DUET_URL", "http://127.0.0.1:8000/v1"),
        api_key=os.environ.get("DUET_API_KEY", "not-needed"),
        # Duet is no model AutoGen knows: say what it can do.
        model_info={"vision": False, "function_calling": True, "json_output": True, "family": ModelFamily.UNKNOWN,
                    "structured_output": False},
    )
    agent = AssistantAgent("assistant", model_client=client, tools=[get_weather], reflect_on_tool_use=True)
    try:
        result = await agent.run(task=question)
    finally:
        await client.close()
    for message in result.messages:
        if isinstance(message, ThoughtEvent):
            print(f"[reasoning] {message.content}")
        elif isinstance(message, ToolCallExecutionEvent):
            print(f"[tool] {message.content[0].content}")
    print(result.messages[-1].to_text())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What's the weather in Oslo?"))
