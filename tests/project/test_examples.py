"""Every script in examples/ runs against the scripted upstream (through a test Duet where it needs one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.conftest import ANSWER, API_KEY, REASONER, ROOT, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream


def weather_model(city: str):  # type: ignore[no-untyped-def]
    """The scripted answer model: asks for the weather tool, then answers from its result."""

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(content=["Forecast: ", json.loads(last["content"])["sky"]])
        return Reply(tool_calls=[ScriptedCall("get_weather", json.dumps({"city": city}))])

    return respond


def run_example(name: str, env: dict[str, str], *args: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    result = subprocess.run([sys.executable, f"examples/{name}", *args], cwd=ROOT, env={**clean, **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_python_duet_example(upstream: ScriptedUpstream) -> None:
    upstream.set_default(weather_model("Paris"))
    upstream.script(REASONER, Reply(reasoning=["Need the weather tool."]))
    output = run_example("python_duet.py", {
        "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
        "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
    }, "Weather in Paris?")
    assert "Need the weather tool." in output
    assert '[tool get_weather -> {"city": "Paris", "temperature_c": 18, "sky": "sunny"}]' in output
    assert output.rstrip().endswith("Forecast: sunny")


def test_openai_sdk_example(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.set_default(weather_model("Rome"))
    upstream.script(REASONER, Reply(reasoning=["Check Rome."]))
    output = run_example("openai_sdk_client.py", {"DUET_URL": f"{duet.base_url}/v1", "DUET_API_KEY": API_KEY}, "Rome?")
    assert "Check Rome." in output and "[tool get_weather -> " in output
    assert output.rstrip().endswith("Forecast: clear")


def test_autogen_assistant_example(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.set_default(weather_model("Oslo"))
    upstream.script(REASONER, Reply(reasoning=["Use the tool for Oslo."]))
    output = run_example("autogen_assistant.py", {"DUET_URL": f"{duet.base_url}/v1", "DUET_API_KEY": API_KEY}, "Oslo?")
    assert '[tool] {"city": "Oslo", "temperature_c": 9, "sky": "rain"}' in output
    assert output.rstrip().endswith("Forecast: rain")
    # The AssistantAgent ran the tool itself and came back to Duet with the result.
    tool_rounds = [r for r in upstream.requests_for(ANSWER) if r.body["messages"][-1]["role"] == "tool"]
    assert len(tool_rounds) == 1
