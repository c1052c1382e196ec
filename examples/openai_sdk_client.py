"""Call a running Duet with the official openai SDK, tool loop included.

    duet serve &                      # or docker compose up
    DUET_URL=http://127.0.0.1:8000/v1 python examples/openai_sdk_client.py "What's the weather in Rome?"
"""

from __future__ import annotations

import json
import os
import sys

import openai

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
    return json.dumps({"city": city, "temperature_c": 21, "sky": "clear"})


def main(question: str) -> None:
    client = openai.OpenAI(base_url=os.environ.get("DUET_URL", "http://127.0.0.1:8000/v1"),
                           api_key=os.environ.get("DUET_API_KEY", "not-needed"))
    model = os.environ.get("DUET_MODEL", "duet")
    messages: list[dict] = [{"role": "user", "content": question}]
    while True:
        with client.chat.completions.stream(model=model, messages=messages, tools=TOOLS) as stream:
            for event in stream:
                if event.type == "chunk" and event.chunk.choices:
                    reasoning = (event.chunk.choices[0].delta.model_extra or {}).get("reasoning_content")
                    if reasoning:
                        print(reasoning, end="", flush=True)
                elif event.type == "content.delta":
                    print(event.delta, end="", flush=True)
            message = stream.get_final_completion().choices[0].message
        print()
        if not message.tool_calls:
            return
        messages.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        for call in message.tool_calls:
            result = get_weather(**json.loads(call.function.arguments))
            print(f"[tool {call.function.name} -> {result}]")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "What's the weather in Rome?")
