"""The answers behind the examples of README.md and docs/getting-started.md: a scripted reasoning
model that plans, and an answer model that calls the client's ``get_weather`` tool, then answers
from its result. ``tests/project/test_docs.py`` runs the README's calls against it and checks the output the
README shows; to see it yourself::

    .venv/bin/python -m tests.scripted_upstream --port 9000 --responder tests.readme_upstream:weather
    DUET_REASONER_BASE_URL=http://127.0.0.1:9000/v1 DUET_ANSWER_BASE_URL=http://127.0.0.1:9000/v1 \\
        DUET_REASONER_MODEL=deepseek-r1 DUET_ANSWER_MODEL=qwen2.5 .venv/bin/duet serve
"""

from __future__ import annotations

from typing import Any

from tests.scripted_upstream import Reply, ScriptedCall

REASONING = ["The user wants ", "the weather in Paris. ", "I should call get_weather ", "for Paris."]
AFTER_THE_TOOL = ["The tool says ", "18 °C and sunny: ", "a picnic day."]
ANSWER = ["It is 18 °C ", "and sunny in Paris."]


def weather(body: dict[str, Any]) -> Reply:
    """Reasoning models (``r1`` or ``reason`` in the name) think; the answer model calls the first
    tool the request offers, or answers once a tool result is in the conversation."""
    model = body.get("model", "")
    messages = body.get("messages", [])
    has_result = any(m.get("role") == "tool" for m in messages)
    if "r1" in model or "reason" in model:
        return Reply(reasoning=AFTER_THE_TOOL if has_result else REASONING, usage=(42, 18))
    if body.get("tools") and not has_result:
        return Reply(tool_calls=[ScriptedCall(body["tools"][0]["function"]["name"], '{"city": "Paris"}', id="call_w1")], usage=(96, 12))
    return Reply(content=ANSWER, usage=(120, 9))
