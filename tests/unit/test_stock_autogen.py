"""Duet leaves AutoGen as it is: importing ``duet.agents`` and serving a request changes no attribute of
any AutoGen module, and a stock AgentChat team built afterwards in the same process runs on stock
classes; Duet's own team keeps its lighter parts (its runtime, agent container and group chat manager
are Duet's subclasses). A fresh interpreter (:data:`PROBE`) records AutoGen's modules before Duet is
imported, so nothing an earlier test imported hides a change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ANSWER, REASONER, ROOT
from tests.scripted_upstream import Reply, ScriptedUpstream

PROBE = r'''
import asyncio, importlib, json, pkgutil, sys

# Every module of autogen-core and AgentChat (and OpenTelemetry's trace API), loaded before Duet is.
import autogen_agentchat, autogen_core, opentelemetry.trace
for package in (autogen_core, autogen_agentchat):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency that is not installed
            pass
watched = {name: dict(vars(module)) for name, module in list(sys.modules.items())
           if name.split(".")[0] in ("autogen_core", "autogen_agentchat", "autogen_ext", "opentelemetry")}

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_agentchat.teams._group_chat import _base_group_chat, _base_group_chat_manager, _chat_agent_container, _events
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer
from autogen_core import DefaultInterventionHandler, SingleThreadedAgentRuntime, _base_agent
from autogen_ext.models.replay import ReplayChatCompletionClient

import duet.agents
from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings

base_url, reasoner, answer = sys.argv[1:4]
report = {}


async def serve_one() -> None:
    settings = PipelineSettings(reasoner=ReasonerSettings(base_url=base_url, model=reasoner),
                                answer=AnswerSettings(base_url=base_url, model=answer))
    async with Duet.from_settings(settings) as duet:
        stream = duet.start([{"role": "user", "content": "hi"}])
        report["duet_answer"] = "".join([event.text async for event in stream if event.kind == "content"])
        await asyncio.wait_for(stream._driver, 10)  # the run has ended and put its team back in the pool
        [slot] = duet._pool._idle  # the team that served it
        runtime = slot.runtime
        report["duet_team"] = type(slot.team).__qualname__
        report["duet_runtime"] = type(runtime).__qualname__
        report["duet_agents"] = sorted(type(agent).__qualname__ for agent in runtime._instantiated_agents.values())
        report["duet_subscriptions"] = sorted(type(s).__qualname__ for s in runtime._subscription_manager.subscriptions)
        report["duet_subscription_ids_drawn"] = any(s._id is not None for s in runtime._subscription_manager.subscriptions)


class Recorder(DefaultInterventionHandler):
    def __init__(self) -> None:
        self.requests = []

    async def on_publish(self, message, *, message_context):
        if isinstance(message, _events.GroupChatRequestPublish):
            self.requests.append(message)
        return message


async def run_stock_team(runtime) -> RoundRobinGroupChat:
    team = RoundRobinGroupChat(
        [AssistantAgent("first", ReplayChatCompletionClient(["one"])), AssistantAgent("second", ReplayChatCompletionClient(["two"]))],
        termination_condition=MaxMessageTermination(3), runtime=runtime)
    if runtime is not None:
        runtime.start()
    result = await team.run(task="go")
    if runtime is not None:
        await runtime.stop_when_idle()
    report.setdefault("stock_spoke", []).append([message.source for message in result.messages])
    return team


async def stock_teams() -> None:
    recorder = Recorder()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder], ignore_unhandled_exceptions=False)
    await run_stock_team(runtime)
    embedded = (await run_stock_team(None))._runtime  # AgentChat's own runtime, made by the team
    for name, used in (("stock", runtime), ("embedded", embedded)):
        report[f"{name}_runtime"] = type(used).__qualname__
        report[f"{name}_agents"] = sorted(type(agent).__qualname__ for agent in used._instantiated_agents.values())
        report[f"{name}_subscriptions"] = sorted(f"{type(s).__module__}.{type(s).__qualname__}"
                                                 for s in used._subscription_manager.subscriptions)
        report[f"{name}_subscription_ids_drawn"] = all(isinstance(s.__dict__.get("_id"), str) for s in used._subscription_manager.subscriptions)
    report["stock_requests"] = [type(request).__qualname__ for request in recorder.requests]
    report["stock_distinct_requests"] = len({id(request) for request in recorder.requests})


for phase in (serve_one, stock_teams):  # bounded, and a failure is reported with the rest
    try:
        asyncio.run(asyncio.wait_for(phase(), 20))
    except BaseException as exc:
        report.setdefault("failures", []).append(f"{phase.__name__}: {exc!r}")
report["identities"] = {
    "trace_invoke_agent_span": _chat_agent_container.trace_invoke_agent_span is __import__("autogen_core").trace_invoke_agent_span,
    "GroupChatRequestPublish": _base_group_chat_manager.GroupChatRequestPublish is _events.GroupChatRequestPublish,
    "TypeSubscription": _base_group_chat.TypeSubscription is __import__("autogen_core").TypeSubscription,
    "TypePrefixSubscription": _base_agent.TypePrefixSubscription is __import__("autogen_core").TypePrefixSubscription,
    "ChatAgentContainer": _base_group_chat.ChatAgentContainer is ChatAgentContainer,
}
report["changed"] = sorted(f"{name}.{attribute}" for name, before in watched.items()
                           for attribute, value in before.items()
                           if vars(sys.modules[name]).get(attribute, before) is not value)
report["added"] = sorted(f"{name}.{attribute}" for name, before in watched.items()
                         for attribute, value in vars(sys.modules[name]).items()
                         if attribute not in before and type(value) is not type(sys)  # a submodule imported since
                         and attribute != "__warningregistry__")  # what the warnings module notes of a warning
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def probe(upstream: ScriptedUpstream) -> dict[str, Any]:
    upstream.reset()
    upstream.script(REASONER, Reply(reasoning=["Say hello."]))
    upstream.script(ANSWER, Reply(content=["Hello", "!"]))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DUET_", "OTEL_"))}
    done = subprocess.run([sys.executable, "-c", PROBE, upstream.base_url, REASONER, ANSWER],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_importing_duet_and_serving_a_request_changes_no_attribute_of_any_autogen_module(probe: dict[str, Any]) -> None:
    assert "failures" not in probe and probe["duet_answer"] == "Hello!"
    assert probe["changed"] == [] and probe["added"] == []
    assert all(probe["identities"].values()), probe["identities"]


def test_a_stock_team_built_after_duet_served_runs_on_stock_classes(probe: dict[str, Any]) -> None:
    stock_subscriptions = sorted(["autogen_core._type_subscription.TypeSubscription"] * 7
                                 + ["autogen_core._type_prefix_subscription.TypePrefixSubscription"] * 3)
    assert probe["stock_spoke"] == [["user", "first", "second"]] * 2
    for runtime in ("stock", "embedded"):
        assert probe[f"{runtime}_runtime"] == "SingleThreadedAgentRuntime"
        assert probe[f"{runtime}_agents"] == ["ChatAgentContainer", "ChatAgentContainer", "RoundRobinGroupChatManager"]
        assert probe[f"{runtime}_subscriptions"] == stock_subscriptions
        assert probe[f"{runtime}_subscription_ids_drawn"]  # as autogen-core makes them: a uuid each
    assert probe["stock_requests"] == ["GroupChatRequestPublish"] * 2 and probe["stock_distinct_requests"] == 2  # one per turn


def test_duets_own_team_keeps_its_lighter_parts(probe: dict[str, Any]) -> None:
    assert probe["duet_team"] == "_RoundRobinTeam" and probe["duet_runtime"] == "LeanAgentRuntime"
    assert probe["duet_agents"] == ["RoundRobinManager", "TurnContainer", "TurnContainer"]
    assert probe["duet_subscriptions"] == sorted(["LeanTypePrefixSubscription"] * 3 + ["LeanTypeSubscription"] * 7)
    assert not probe["duet_subscription_ids_drawn"]
