"""Drive the duet directly from Python, and answer its client tool calls in the script.

No server: the script builds the pipeline from the same settings `duet serve` reads (DUET_*
variables; by default a local Ollama with deepseek-r1:7b and qwen2.5:7b), streams the reasoning and
the answer, and runs the tools the answer model asks for, then continues the conversation.

    python examples/python_duet.py "What's the weather in Paris?"
"""

from __future__ import annotations

import asyncio
import json
import sys

from duet.agents import ContentDelta, Duet, Failed, ReasoningDelta, ToolCallsRequested
from duet.api import EnvSettings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def get_weather(city: str) -> str:
    """The client side of the tool: here, a canned answer."""
    return json.dumps({"city": city, "temperature_c": 18, "sky": "sunny"})


async def main(question: str) -> None:
    duet = Duet.from_settings(EnvSettings().default_pipeline())
    messages: list[dict] = [{"role": "user", "content": question}]
    try:
        while True:
            calls = []
            async for event in duet.stream(messages, tools=TOOLS):
                if isinstance(event, ReasoningDelta):
                    print(event.text, end="", flush=True)
                elif isinstance(event, ContentDelta):
                    print(event.text, end="", flush=True)
                elif isinstance(event, ToolCallsRequested):
                    calls = event.calls
                elif isinstance(event, Failed):
                    raise SystemExit(f"\nfailed: {event.message}")
            print()
            if not calls:
                return
            # The duet stopped at client tool calls: run them here and send the results back.
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]})
            for call in calls:
                result = get_weather(**json.loads(call.arguments))
                print(f"[tool {call.name} -> {result}]")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    finally:
        await duet.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What's the weather in Paris?"))
