"""The OpenAI Agents SDK (``openai-agents``) with ``OpenAIResponsesModel`` pointed at Duet: an agent
with a ``@function_tool``, run by ``Runner.run`` or ``Runner.run_streamed``.

Run as a script, in a process of its own (the repository's ``agents/`` folder would shadow the
SDK's ``agents`` package inside the test process)::

    python tests/agents_sdk_client.py BASE_URL API_KEY run|streamed

Prints one JSON line: the final output, the run's item types, the tool's calls and the streamed text.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

# Run as a script, this folder comes first on sys.path, and tests/http/ (a folder of tests) would shadow the
# standard library's http (which the SDK's HTTP stack imports): this script needs nothing of its folder.
if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


async def main(base_url: str, api_key: str, mode: str) -> None:
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    agent = Agent(name="assistant", instructions="Be brief.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="duet", openai_client=client))
    streamed: list[str] = []
    if mode == "run":
        result = await Runner.run(agent, "Weather in Paris?")
    else:
        result = Runner.run_streamed(agent, "Weather in Paris?")
        async for event in result.stream_events():
            if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
                streamed.append(event.data.delta)
    print(json.dumps({"final": result.final_output, "items": [item.type for item in result.new_items], "calls": calls,
                      "streamed": "".join(streamed)}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
