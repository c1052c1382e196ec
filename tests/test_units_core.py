"""The pure parts of the core, tested directly (no HTTP): the driver<->agent messages, the run
binding, the request a service tool is told about, conversation conversion, splicing a tool round
back, the team pool and the team factory. Real objects throughout; the model clients that answer
are AutoGen's own ``ReplayChatCompletionClient`` (canned answers, no network), and those a team
factory shares are real OpenAI clients pointed at a port where nobody listens."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import aiohttp

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import Response, TaskResult
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import (
    HandoffMessage,
    ModelClientStreamingChunkEvent,
    StopMessage,
    TextMessage,
    ToolCallRequestEvent,
)
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_agentchat.teams._group_chat._events import GroupChatAgentResponse  # not exported (0.7.5)
from autogen_core import CancellationToken, ComponentModel, FunctionCall, TopicId
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient

from duet.agents.upstream import ANSWER_MODEL_INFO
from duet.agents import ANSWERER_NAME, AnswerSettings, ContentDelta, ConversationError, OpenAICompatibleClient, PipelineSettings, REASONER_NAME, ReasonerSettings, ReasoningDelta, TeamLoadError, ToolCall, ToolCallsRequested, UpstreamError, Usage, build_team, conversation_from_openai
from duet.agents._names import CLIENT
from duet.agents._run import DuetRun, bind_run, current_run
from duet.agents._conversation import ImageURL
from duet.agents.pipeline import TeamFactory
from duet.agents._messages import task_messages
from duet.agents._base import DuetAgent
from duet.agents.continuations import Continuation, splice, tool_rounds
from duet.agents._conversation import DUET_CALL_ID, MISSING_RESULT, ends_with_tool_results, last_user_text
from duet.agents._messages import (
    AnswerReply,
    ClientHandoff,
    FailureReply,
    ReasoningReply,
    answer_reply,
    as_agentchat_event,
    carries_task,
    client_handoff,
    failure_reply,
    read_reply,
    read_task,
    reasoning_reply,
)
from duet.agents.pipeline._pool import TeamPool, TeamSlot
from duet.agents.runtime import LeanAgentRuntime
from duet.agents.pipeline._team import reset_team
from duet.workbenches import DuetWorkbench, ProxyTool, PythonFunctionTool, RequestContext, model_safe_name

CONVERSATION = [
    SystemMessage(content="Be brief."),
    UserMessage(content="Weather in Paris?", source="user"),
]


def calls(*names: str) -> list[FunctionCall]:
    return [FunctionCall(id=f"call_{name}", name=name, arguments="{}") for name in names]


def results(*names: str, content: str = "ok") -> FunctionExecutionResultMessage:
    return FunctionExecutionResultMessage(
        content=[FunctionExecutionResult(call_id=f"call_{name}", name=name, content=f"{content} {name}") for name in names]
    )


# -- the messages ----------------------------------------------------------------------------------


def test_task_is_read_back_with_its_reasoning() -> None:
    task = task_messages(list(CONVERSATION), earlier_reasoning="Look it up.")
    assert carries_task(task) and read_task(task) == (CONVERSATION, "Look it up.")
    handoff = task[0]
    assert isinstance(handoff, HandoffMessage) and handoff.source == CLIENT and handoff.content == "Weather in Paris?"
    # A reasoner's reply that follows is reasoning too (the answer agent's view), never conversation.
    assert read_task([*task, reasoning_reply(REASONER_NAME, "Call the tool.")]) == (CONVERSATION, "Look it up.\n\nCall the tool.")
    assert len(task_messages(list(CONVERSATION))) == 1  # no earlier reasoning: the handoff alone
    tools_only = [*CONVERSATION, AssistantMessage(content=calls("f"), source="assistant"), results("f")]
    assert task_messages(tools_only)[0].content == "Weather in Paris?"  # the last user text names the task
    assert task_messages([results("f")])[0].content == "(continue)"


def test_every_reply_is_read_back_by_the_driver() -> None:
    usage = RequestUsage(prompt_tokens=3, completion_tokens=4)
    turn = [AssistantMessage(content=calls("lookup", "notify"), source=ANSWERER_NAME), results("lookup")]
    assert read_reply(reasoning_reply(REASONER_NAME, "plan", usage)) == ReasoningReply("plan")
    assert read_reply(reasoning_reply(REASONER_NAME, "")) == ReasoningReply("")
    for reason in ("stop", "length", "content_filter"):
        assert read_reply(answer_reply(ANSWERER_NAME, "Sunny.", reason, usage)) == AnswerReply("Sunny.", reason)  # type: ignore[arg-type]
    handoff = client_handoff(ANSWERER_NAME, calls("notify"), turn, usage)
    reply = read_reply(handoff)
    assert isinstance(reply, ClientHandoff) and reply.turn is turn  # the hidden turn, not a copy
    assert handoff.target == CLIENT and handoff.models_usage == usage and "notify" in handoff.content
    failure = failure_reply(REASONER_NAME, RuntimeError("model down"))
    assert read_reply(failure) == FailureReply("reasoner failed: model down")
    assert failure.target == CLIENT  # a handoff to the client: what ends every Duet team


def test_built_messages_are_valid_agentchat_messages() -> None:
    """What AutoGen Studio stores and shows: each message survives its own JSON round trip
    (including those built with ``model_construct``) and reads back the same."""
    usage = RequestUsage(prompt_tokens=1, completion_tokens=2)
    built = [
        *task_messages(list(CONVERSATION), "earlier"),
        reasoning_reply(REASONER_NAME, "plan", usage),
        answer_reply(ANSWERER_NAME, "Sunny.", "stop", usage),
        client_handoff(ANSWERER_NAME, calls("notify"), [AssistantMessage(content=calls("notify"), source=ANSWERER_NAME), results()], usage),
        failure_reply(ANSWERER_NAME, ValueError("bad")),
    ]
    for message in built:
        again = type(message).model_validate_json(message.model_dump_json())
        assert again.model_dump() == message.model_dump()
        assert read_reply(again) == read_reply(message)
    assert read_task(built[:2]) == (CONVERSATION, "earlier")


def test_messages_from_outside_duet_are_read_the_agentchat_way() -> None:
    typed = TextMessage(source="user", content="What is Duet?")
    other_agent = TextMessage(source="critic", content="Be precise.")
    assert not carries_task([typed, other_agent])
    conversation, reasoning = read_task([typed, other_agent])
    assert reasoning == "" and [(m.content, m.source) for m in conversation] == [("What is Duet?", "user"), ("Be precise.", "critic")]
    # Not Duet's replies: the driver ignores them...
    for message in (typed, StopMessage(source="x", content="stop"), TaskResult(messages=[]),
                    ModelClientStreamingChunkEvent(source="answerer", content="piece")):
        assert read_reply(message) is None
    # ...but a stock agent's handoff to the client still hands its context over, and a finish
    # reason the protocol does not know reads as "stop".
    stock = HandoffMessage(source="assistant", target=CLIENT, content="over to you", context=[results("f")])
    assert read_reply(stock) == ClientHandoff([results("f")])
    odd = TextMessage(source=ANSWERER_NAME, content="x", metadata={"finish_reason": "tool_use"})
    assert read_reply(odd) == AnswerReply("x", "stop")


def test_events_outside_a_run_are_stock_agentchat_events() -> None:
    thinking = as_agentchat_event(ReasoningDelta(text="hm", source=REASONER_NAME), REASONER_NAME)
    text = as_agentchat_event(ContentDelta(text="Hi"), ANSWERER_NAME)
    asked = as_agentchat_event(ToolCallsRequested(calls=[ToolCall(id="c1", name="kb.lookup", arguments="{}")]), ANSWERER_NAME)
    assert isinstance(thinking, ModelClientStreamingChunkEvent) and thinking.metadata and thinking.content == "hm"
    assert isinstance(text, ModelClientStreamingChunkEvent) and not text.metadata and text.content == "Hi"
    assert isinstance(asked, ToolCallRequestEvent) and asked.content[0].name == "kb.lookup"
    assert as_agentchat_event(Usage(source="a", prompt_tokens=1, completion_tokens=1), "a") is None


# -- the run binding -------------------------------------------------------------------------------


def _run(sink: list[Any]) -> DuetRun:
    return DuetRun(emit=lambda event: sink.append(event) or True, workbench=DuetWorkbench([]))


class _EarlyTurn:
    def __init__(self) -> None:
        self.closed = False

    async def under_way(self) -> None:
        return None

    async def close(self) -> None:
        self.closed = True


def test_a_turn_started_ahead_goes_to_its_agent_for_exactly_its_messages() -> None:
    task = [TextMessage(source="client", content="hi"), TextMessage(source="client", content="more")]
    run, call = _run([]), _EarlyTurn()
    run.head_start("reasoner", task, call)
    assert run.take_head_start("answerer", task) is None  # another agent's turn
    assert run.take_head_start("reasoner", task[:1]) is None  # other messages
    assert run.take_head_start("reasoner", [m.model_copy() for m in task]) is None  # equal, but not the messages it was started on
    assert run.take_head_start("reasoner", list(task)) is call
    assert run.take_head_start("reasoner", task) is None  # taken once: the agent owns it now
    asyncio.run(run.drop_head_start())
    assert not call.closed  # a taken turn is its agent's


class _GatedAgent(DuetAgent):
    """Its turn waits for ``gate`` before each of ``events``, and before its reply."""

    def __init__(self, gate: asyncio.Event, events: list[Any]) -> None:
        super().__init__("gated", "waits for its gate", None)
        self._gate, self._events = gate, events

    async def _turn(self, messages: Any, run: Any, cancellation_token: CancellationToken) -> Any:
        for event in self._events:
            await self._gate.wait()
            self._gate.clear()
            yield event
        await self._gate.wait()
        yield Response(chat_message=TextMessage(source=self.name, content="done"))


@pytest.mark.parametrize("events", [[ReasoningDelta(text="first", source="gated"), ReasoningDelta(text="second", source="gated")], []], ids=["events", "none"])
def test_the_team_routes_a_turn_started_ahead_once_its_first_event_is_on_its_way(events: list[Any]) -> None:
    """The team's routing is not on the path of the first token: the run waits for the turn's
    first event (or its end, when it hands on none) before the team takes its first step."""
    async def scenario() -> None:
        gate, sink = asyncio.Event(), []
        run = _run(sink)
        await _GatedAgent(gate, events).head_start([TextMessage(source="client", content="hi")], run, CancellationToken())
        waiting = asyncio.ensure_future(run.head_start_under_way())
        await asyncio.sleep(0.05)
        assert not waiting.done() and sink == []  # nothing handed on yet: the team would still wait
        gate.set()
        await asyncio.wait_for(waiting, 5)  # at the first event, while the turn still waits for the next
        assert sink == events[:1]
        await run.drop_head_start()

    asyncio.run(scenario())


def test_a_turn_started_ahead_that_no_team_took_is_stopped_with_the_run() -> None:
    run, call = _run([]), _EarlyTurn()
    run.head_start("reasoner", [TextMessage(source="client", content="hi")], call)
    asyncio.run(run.drop_head_start())
    assert call.closed
    asyncio.run(run.drop_head_start())  # nothing left: a no-op


def test_bind_run_sets_and_resets() -> None:
    outer, inner = _run([]), _run([])
    assert current_run() is None
    with bind_run(outer):
        assert current_run() is outer
        with bind_run(inner):
            assert current_run() is inner
        assert current_run() is outer
        with pytest.raises(RuntimeError), bind_run(inner):
            raise RuntimeError("the run failed")
        assert current_run() is outer  # unbound however the block ends
    assert current_run() is None


def test_tasks_created_inside_the_binding_inherit_it() -> None:
    async def main() -> tuple[object, object, object]:
        run = _run([])
        with bind_run(run):
            inside = asyncio.create_task(asyncio.sleep(0, result=None))
            seen_inside = asyncio.create_task(_current())
        seen_after = asyncio.create_task(_current())
        await inside
        return run, await seen_inside, await seen_after

    async def _current() -> object:
        return current_run()

    run, seen_inside, seen_after = asyncio.run(main())
    assert seen_inside is run and seen_after is None


def _team(runtime: LeanAgentRuntime | None = None, reasoning: str = "Paris is in France.", answer: str = "Sunny today.") -> RoundRobinGroupChat:
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    return build_team(settings, ReplayChatCompletionClient([answer]), ReplayChatCompletionClient([reasoning]), runtime=runtime)


def test_a_bound_run_gets_the_events_of_a_team_on_its_own_runtime() -> None:
    """The runtime is started inside the binding: its handler tasks see the run, so the agents'
    events reach the run's sink, and the team yields only the replies the driver reads."""
    events: list[Any] = []

    async def main() -> list[Any]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        team = _team(runtime)
        with bind_run(_run(events)):
            runtime.start()
            replies = [read_reply(m) async for m in team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]
        await runtime.stop_when_idle()
        assert current_run() is None
        return replies

    replies = asyncio.run(main())
    assert replies == [ReasoningReply("Paris is in France."), AnswerReply("Sunny today.", "stop"), None]  # None: the TaskResult
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Paris is in France."
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Sunny today."
    assert [e.source for e in events if isinstance(e, Usage)] == [REASONER_NAME, ANSWERER_NAME]


@pytest.mark.parametrize("traced", [False, True], ids=["lean", "traced"])
def test_a_team_reset_after_a_run_is_agentchats_and_the_team_runs_again(monkeypatch: pytest.MonkeyPatch, traced: bool) -> None:
    """Right after a run (its runtime still started, its last handlers maybe still pending, as the
    pool settles it), ``reset_team`` on an unwatched lean runtime calls each agent's reset handler
    itself (no runtime message); the team is left as AgentChat's reset leaves it, and runs again. A
    watched runtime (spans) gets AgentChat's reset, one message per agent."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "false" if traced else "true")
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))

    async def run_once(team: RoundRobinGroupChat, runtime: LeanAgentRuntime) -> list[Any]:
        with bind_run(_run([])):
            runtime.start()
            return [read_reply(m) async for m in team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]

    async def agentchats_reset(team: RoundRobinGroupChat, runtime: LeanAgentRuntime) -> None:
        await team.reset()
        await runtime.stop_when_idle()

    async def main(reset: Any) -> tuple[Any, int, list[Any], list[Any]]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        team = build_team(settings, ReplayChatCompletionClient(["Sunny.", "Rain."]), ReplayChatCompletionClient(["Hmm.", "Aha."]), runtime=runtime)
        first = await run_once(team, runtime)
        # A message the run's last handlers still deliver (no turn of the loop has run them yet):
        # the reset must come after it, or the next run would find it in a buffer.
        late = GroupChatAgentResponse(response=Response(chat_message=TextMessage(source=ANSWERER_NAME, content="late")), name=ANSWERER_NAME)
        await runtime.publish_message(late, TopicId(team._participant_topic_types[0], team._team_id))  # the reasoner's container
        sent, send = [], runtime.send_message

        async def counted(*args: Any, **kwargs: Any) -> Any:
            sent.append(args[0])
            return await send(*args, **kwargs)

        runtime.send_message = counted  # type: ignore[method-assign]
        await reset(team, runtime)
        runtime.send_message = send  # type: ignore[method-assign]
        assert runtime._run_context is None  # stopped: the next run starts it
        state = await team.save_state()
        again = await run_once(team, runtime)
        await runtime.stop_when_idle()
        return state, len(sent), first, again

    ours = asyncio.run(main(reset_team))
    agentchats = asyncio.run(main(agentchats_reset))
    assert ours[0] == agentchats[0]  # the same state: buffers, thread, turn and speaker all reset
    assert all(not agent.get("message_buffer") for agent in ours[0]["agent_states"].values())
    assert agentchats[1] == 3 and ours[1] == (3 if traced else 0)  # two participants and the manager
    assert ours[2] == [ReasoningReply("Hmm."), AnswerReply("Sunny.", "stop"), None]
    assert ours[3] == agentchats[3]  # the next run goes as after AgentChat's reset: the reasoner speaks first again
    assert [type(reply) for reply in ours[3]] == [ReasoningReply, AnswerReply, type(None)]


def test_a_duet_task_without_a_bound_run_fails_loudly() -> None:
    async def main() -> None:
        await _team().run(task=task_messages(list(CONVERSATION)))

    with pytest.raises(RuntimeError, match=r"RunNotBoundError.*reasoner was handed a Duet task.*no run is bound"):
        asyncio.run(main())


def test_a_plain_agentchat_task_needs_no_binding() -> None:
    """What AutoGen Studio sends: a text task; the agents yield their events the AgentChat way."""

    async def main() -> list[Any]:
        return [m async for m in _team().run_stream(task="Weather in Paris?")]

    items = asyncio.run(main())
    replies = [read_reply(m) for m in items]
    assert ReasoningReply("Paris is in France.") in replies and AnswerReply("Sunny today.", "stop") in replies
    chunks = [m for m in items if isinstance(m, ModelClientStreamingChunkEvent)]
    assert "".join(c.content for c in chunks if c.source == ANSWERER_NAME) == "Sunny today."


# -- the request a service tool is told about -------------------------------------------------------


def who_asks(city: str, _context: RequestContext) -> dict[str, Any]:
    """Reports the request it runs for."""
    return {"city": city, "request_id": _context.request_id, "user": _context.user, "pipeline": _context.pipeline,
            "thread": threading.current_thread().name}


async def who_asks_async(_context: RequestContext) -> str:
    return _context.request_id


def _text(result: Any) -> str:
    return "".join(part.content for part in result.result)


def test_the_request_workbench_hands_its_request_to_service_tools() -> None:
    request = RequestContext(request_id="req-1", user="ada", pipeline="duet")
    tools = [PythonFunctionTool(who_asks), PythonFunctionTool(who_asks_async)]
    workbench = DuetWorkbench.for_request(tools, [ProxyTool("client_tool", parameters={"type": "object"})], request=request)

    async def main() -> list[Any]:
        streamed = [item async for item in workbench.call_tool_stream("who_asks", {"city": "Paris"}, call_id="c1")]
        called = await workbench.call_tool("who_asks_async", {})
        outside = await DuetWorkbench(tools).call_tool("who_asks_async", {})  # not a request's workbench
        direct = await tools[0].run_json({"city": "Rome"}, CancellationToken())  # the tool called by itself
        bad = await workbench.call_tool("who_asks", {"town": "Paris"})  # arguments the tool does not take
        return [streamed, called, outside, direct, bad]

    streamed, called, outside, direct, bad = asyncio.run(main())
    assert len(streamed) == 1 and not streamed[0].is_error
    assert '"request_id": "req-1", "user": "ada", "pipeline": "duet"' in _text(streamed[0])
    assert '"thread": "duet-tool' in _text(streamed[0])  # sync code still runs off the event loop
    assert _text(called) == "req-1" and _text(outside) == "" and direct["request_id"] == "" and direct["user"] is None
    assert bad.is_error and "city" in _text(bad)
    assert workbench.request is request


# -- conversation conversion ------------------------------------------------------------------------


def test_legacy_function_calls_and_results_become_tool_rounds() -> None:
    conversation = conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>hm</think>Calling.", "function_call": {"name": "kb.search", "arguments": None}},
        {"role": "function", "name": "anything", "content": [{"type": "text", "text": "found"}]},
    ])
    assistant, outcome = conversation[1], conversation[2]
    assert isinstance(assistant, AssistantMessage) and assistant.thought == "Calling."  # <think> stripped
    [call] = assistant.content  # type: ignore[misc]
    assert call.name == model_safe_name("kb.search") and call.arguments == "{}" and DUET_CALL_ID.match(call.id)
    assert isinstance(outcome, FunctionExecutionResultMessage)
    assert [(r.call_id, r.name, r.content) for r in outcome.content] == [(call.id, call.name, "found")]
    assert ends_with_tool_results(conversation) and last_user_text(conversation) == "q"


def test_a_new_turn_closes_calls_left_without_results() -> None:
    conversation = conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "never mind"},
    ])
    assert [type(m).__name__ for m in conversation] == ["UserMessage", "AssistantMessage", "FunctionExecutionResultMessage", "UserMessage"]
    assert conversation[2].content[0].content == MISSING_RESULT and conversation[2].content[0].is_error  # type: ignore[union-attr]
    assert not ends_with_tool_results(conversation)


def test_images_are_kept_as_urls() -> None:
    [message] = conversation_from_openai([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "sharp"}},
        {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
    ]}])
    text, remote, inline = message.content  # type: ignore[misc]
    assert text == "What is this?" and isinstance(remote, ImageURL) and isinstance(inline, ImageURL)
    assert remote.to_openai_format() == {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "auto"}}
    assert inline.to_base64() == "AAAA" and last_user_text([message]) == "What is this?"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hello", "messages"),
        (["hello"], "messages[0]"),
        ([{"role": "critic", "content": "x"}], "messages[0].role"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0].image_url"),
        ([{"role": "system", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
        ([{"role": "system", "content": 42}], "messages[0].content"),
        ([{"role": "assistant", "tool_calls": {"id": "a"}}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "f"}}]}], "messages[0].tool_calls[0].id"),
        ([{"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f"}}]}], "messages[0].tool_calls[0].type"),
        ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}, {"id": "a", "function": {"name": "g"}}]}],
         "messages[0].tool_calls[1].id"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}],
         "messages[0].tool_calls[0].function.arguments"),
        ([{"role": "assistant", "function_call": {"arguments": "{}"}}], "messages[0].function_call"),
    ],
)
def test_unusable_messages_are_named_by_their_param(messages: Any, param: str) -> None:
    with pytest.raises(ConversationError) as error:
        conversation_from_openai(messages)
    assert error.value.param == param


# -- splicing a tool round back ---------------------------------------------------------------------


def test_tool_rounds_since_the_last_user_message() -> None:
    round_one = [AssistantMessage(content=calls("a"), source="assistant"), results("a")]
    round_two = [AssistantMessage(content="thinking aloud", source="assistant"), AssistantMessage(content=calls("b"), source="assistant"), results("b")]
    assert tool_rounds([*CONVERSATION, *round_one, *round_two]) == [2, 5]
    assert tool_rounds([*round_one, UserMessage(content="next", source="user"), *round_two]) == [4]
    assert tool_rounds(CONVERSATION) == []


def test_splice_puts_the_hidden_part_of_a_round_back() -> None:
    """The client saw only its call (``notify``); the stored turn holds an earlier service-only round
    and the round's full calls with the service result. Results merge in call order."""
    earlier = [AssistantMessage(content=calls("search"), source="answerer"), results("search", content="found")]
    full_calls = AssistantMessage(content=calls("notify", "lookup"), thought="Checking.", source="answerer")
    stored = Continuation(turn=[*earlier, full_calls, results("lookup", content="service")], reasoning="plan")
    seen = [*CONVERSATION, AssistantMessage(content=calls("notify"), source="assistant"), results("notify", content="client"),
            UserMessage(content="thanks", source="user")]
    spliced = splice(seen, 2, stored)
    assert spliced[:2] == CONVERSATION and spliced[2:4] == earlier and spliced[4] is full_calls
    merged = spliced[5]
    assert isinstance(merged, FunctionExecutionResultMessage)
    assert [(r.name, r.content) for r in merged.content] == [("notify", "client notify"), ("lookup", "service lookup")]
    assert spliced[6:] == seen[4:]
    # The follow-up may end at the calls (no results yet): the stored results stand alone.
    assert [r.name for r in splice(seen[:3], 2, stored)[5].content] == ["lookup"]  # type: ignore[union-attr]


def test_splice_leaves_the_conversation_alone_without_a_usable_turn() -> None:
    seen = [*CONVERSATION, AssistantMessage(content=calls("notify"), source="assistant"), results("notify")]
    assert splice(seen, 2, Continuation()) is seen
    assert splice(seen, 2, Continuation(turn=[results("x"), AssistantMessage(content=calls("x"), source="a")])) is seen


# -- the team pool and the team factory --------------------------------------------------------------


def test_team_pool_reuses_bounds_and_drains() -> None:
    made: list[TeamSlot] = []

    def factory() -> TeamSlot:
        made.append(TeamSlot(_team()))
        return made[-1]

    pool = TeamPool(factory, max_idle=2)
    first, second, third = pool.acquire(), pool.acquire(), pool.acquire()
    assert made == [first, second, third]  # an empty pool makes a new team for each lease
    assert pool.release(first) and pool.release(second) and not pool.release(third)  # full: the caller closes it
    assert pool.acquire() is second and pool.acquire() is first and len(made) == 3  # reused, newest first
    pool.release(first)
    assert pool.drain() == [first] and pool.drain() == []
    assert pool.acquire() is not first and len(made) == 4


def _participants(slot: TeamSlot) -> list[Any]:
    return list(slot.team._participants)  # type: ignore[attr-defined]  # AgentChat has no public accessor


NOBODY_LISTENS = "http://127.0.0.1:1/v1"


def _lean(model: str) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(model, NOBODY_LISTENS)


class CustomOpenAIClient(OpenAIChatCompletionClient):
    """A client of the tests' own, a subclass of AutoGen's OpenAI client: custom code, which a team
    factory does not share. Keeps every instance made (a factory makes them from a component)."""

    component_provider_override = "tests.test_units_core.CustomOpenAIClient"
    made: ClassVar[list["CustomOpenAIClient"]] = []

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        CustomOpenAIClient.made.append(self)

    @property
    def closed(self) -> bool:
        return self._client.is_closed()  # the openai SDK client it made at once (its HTTP connection pool)


def _custom(model: str) -> CustomOpenAIClient:
    return CustomOpenAIClient(model=model, base_url=NOBODY_LISTENS, api_key="unused", model_info=ANSWER_MODEL_INFO)


async def _session_of(client: ChatCompletionClient) -> aiohttp.ClientSession:
    """The connection pool of Duet's client, made by a readiness check (which fails: nobody listens)."""
    assert isinstance(client, OpenAICompatibleClient)
    with pytest.raises(UpstreamError):
        await client.check_ready(5)
    assert client._session is not None and not client._session.closed
    return client._session


def _component(reasoner: ChatCompletionClient | None = None, answer: ChatCompletionClient | None = None) -> ComponentModel:
    """Duet's team, as a team file holds it; AutoGen's replay clients unless told otherwise."""
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    answer = answer or ReplayChatCompletionClient(["done"])
    return build_team(settings, answer, reasoner or ReplayChatCompletionClient(["plan"])).dump_component()


def test_team_factory_shares_clients_made_for_concurrent_use_and_runs_duet_teams_on_the_lean_runtime() -> None:
    stock = OpenAIChatCompletionClient(model="a", base_url=NOBODY_LISTENS, api_key="unused", model_info=ANSWER_MODEL_INFO)
    component = _component(reasoner=_lean("r"), answer=stock)  # Duet's client and AutoGen's OpenAI client
    factory = TeamFactory(component, origin="test")
    slots = [factory() for _ in range(3)]
    assert all(isinstance(slot.runtime, LeanAgentRuntime) and not slot.owns_agents and not slot.own_clients for slot in slots)
    assert len({id(slot.team) for slot in slots}) == 3 and len({id(slot.runtime) for slot in slots}) == 3
    clients = [[agent.model_client for agent in _participants(slot)] for slot in slots]
    assert all(c[0] is clients[0][0] and c[1] is clients[0][1] for c in clients)  # created once, shared
    assert factory.model_clients == clients[0]
    assert [type(client) for client in clients[0]] == [OpenAICompatibleClient, OpenAIChatCompletionClient]
    assert slots[0].team.dump_component() == component  # the same team, rebuilt

    settings = PipelineSettings(name="p", reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    from_settings = TeamFactory.from_settings(settings)
    slot = from_settings()
    assert [agent.model_client for agent in _participants(slot)] == from_settings.model_clients  # the clients it made
    assert [agent.model_client.dump_component().config["model"] for agent in _participants(slot)] == ["r", "a"]


def test_team_factory_gives_each_team_its_own_client_of_any_other_kind() -> None:
    """A team file whose answer agent uses AutoGen's ReplayChatCompletionClient (which replays a
    script, so each team needs its own) beside Duet's client (shared)."""
    factory = TeamFactory(_component(reasoner=_lean("r"), answer=ReplayChatCompletionClient(["Sunny today."])))
    slots = [factory() for _ in range(3)]
    reasoners = [_participants(slot)[0].model_client for slot in slots]
    answerers = [_participants(slot)[1].model_client for slot in slots]
    assert all(client is reasoners[0] for client in reasoners) and factory.model_clients == [reasoners[0]]
    assert len({id(client) for client in answerers}) == 3 and all(type(c) is ReplayChatCompletionClient for c in answerers)
    assert [list(slot.own_clients) for slot in slots] == [[client] for client in answerers]  # each closes with its team

    # Two teams run one after the other: each replays the script from its start.
    scripted = TeamFactory(_component(answer=ReplayChatCompletionClient(["Sunny today."])))

    async def main() -> list[list[Any]]:
        replies: list[list[Any]] = []
        for slot in (scripted(), scripted()):
            assert slot.runtime is not None
            with bind_run(_run([])):
                slot.runtime.start()
                task = task_messages(list(CONVERSATION))
                replies.append([read_reply(m) async for m in slot.team.run_stream(task=task, output_task_messages=False)])
            await slot.runtime.stop_when_idle()
        return replies

    assert asyncio.run(main()) == [[ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]] * 2


def test_a_served_team_keeps_its_agents_factories_as_partial_calls_and_dumps_as_the_stock_team() -> None:
    """The runtime keeps the factory of each of a team's agents for as long as the team: partial calls
    of the classes (Duet's subclasses of AgentChat's), not AgentChat's closures; the team still runs
    and dumps as the stock one."""
    import functools

    from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer
    from autogen_agentchat.teams._group_chat._round_robin_group_chat import RoundRobinGroupChatManager

    from duet.agents.pipeline._group_chat import RoundRobinManager, TurnContainer
    from duet.agents.pipeline._team import duet_termination

    component = _component(answer=ReplayChatCompletionClient(["Sunny today."]))
    slot = TeamFactory(component)()

    async def main() -> list[Any]:
        assert slot.runtime is not None
        with bind_run(_run([])):
            slot.runtime.start()
            replies = [read_reply(m) async for m in slot.team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]
        await slot.runtime.stop_when_idle()
        return replies

    assert asyncio.run(main()) == [ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]
    made = [factory.make for factory in slot.runtime._agent_factories.values()]  # type: ignore[union-attr]
    assert all(isinstance(make, functools.partial) for make in made)
    assert sorted(make.func.__name__ for make in made) == sorted([TurnContainer.__name__] * 2 + [RoundRobinManager.__name__])
    assert issubclass(TurnContainer, ChatAgentContainer) and issubclass(RoundRobinManager, RoundRobinGroupChatManager)  # Duet's own
    assert slot.team.dump_component() == RoundRobinGroupChat.load_component(component).dump_component() == component
    # Duet's termination is made, not loaded from the component (no validation per team): the same two conditions.
    conditions = slot.team._termination_condition._conditions  # type: ignore[union-attr]
    assert [condition.dump_component() for condition in conditions] == [c.dump_component() for c in duet_termination()._conditions]
    assert not any(condition.terminated for condition in conditions)


def test_team_factory_close_closes_the_shared_clients_and_the_team_no_request_leased() -> None:
    async def main() -> None:
        component = _component(reasoner=_lean("r"), answer=_custom("a"))
        CustomOpenAIClient.made.clear()
        factory = TeamFactory(component)
        [spare_client] = CustomOpenAIClient.made  # the answer client of the team made to check the component
        shared = await _session_of(factory.model_clients[0])
        await factory.close()
        assert shared.closed and spare_client.closed

        # Teams handed out are their holders': a slot closes its own clients, never a shared one.
        factory = TeamFactory(component)
        first, second = factory(), factory()
        shared = await _session_of(factory.model_clients[0])
        [first_client], [second_client] = first.own_clients, second.own_clients
        await second.close()
        assert second_client.closed and not first_client.closed and not shared.closed  # type: ignore[attr-defined]
        await factory.close()
        assert shared.closed and not first_client.closed  # type: ignore[attr-defined]
        await first.close()
        assert first_client.closed  # type: ignore[attr-defined]

        # A team loaded whole: the unleased one's agents close, and with them their clients.
        CustomOpenAIClient.made.clear()
        whole = RoundRobinGroupChat([AssistantAgent("helper", _custom("a"))], termination_condition=MaxMessageTermination(2))
        factory = TeamFactory(whole.dump_component())
        spare_client = CustomOpenAIClient.made[-1]
        await factory.close()
        assert spare_client.closed

    asyncio.run(main())


def test_a_team_factory_that_fails_to_load_closes_the_clients_it_made() -> None:
    """The reasoner's client is loaded from the component, the answer client is given (as a
    settings pipeline gives it); the termination condition then fails to load."""
    broken = _component(reasoner=_custom("r")).model_dump()
    broken["config"]["termination_condition"]["provider"] = "no_such_package.Condition"

    async def main() -> tuple[aiohttp.ClientSession, list[CustomOpenAIClient]]:
        given = _lean("a")
        session = await _session_of(given)
        CustomOpenAIClient.made.clear()
        with pytest.raises(TeamLoadError, match=r"provider 'no_such_package\.Condition' \(termination\) cannot be imported"):
            TeamFactory(ComponentModel.model_validate(broken), {ANSWERER_NAME: given})
        return session, list(CustomOpenAIClient.made)

    session, loaded = asyncio.run(main())
    assert session.closed and len(loaded) == 1 and loaded[0].closed


def test_a_standalone_team_has_clients_of_its_own() -> None:
    """What ``Duet.new_team()`` hands out: closing its agents leaves the pipeline's clients open."""
    component = _component(reasoner=_lean("r"), answer=_lean("a"))
    factory = TeamFactory(component)
    team = factory.standalone()
    agents = list(team._participants)  # type: ignore[attr-defined]
    assert team.dump_component() == component
    assert not {id(agent.model_client) for agent in agents} & {id(client) for client in factory.model_clients}

    async def main() -> list[aiohttp.ClientSession]:
        shared = [await _session_of(client) for client in factory.model_clients]
        for agent in agents:
            await agent.close()
        return shared

    assert not any(session.closed for session in asyncio.run(main()))


def test_team_factory_loads_other_teams_whole() -> None:
    """A team with a participant that is not one of Duet's agents (Studio's AssistantAgent)."""
    component = RoundRobinGroupChat(
        [AssistantAgent("helper", ReplayChatCompletionClient(["hi"]))], termination_condition=MaxMessageTermination(2)
    ).dump_component()
    factory = TeamFactory(component)
    slots = [factory(), factory()]
    assert all(slot.runtime is None and slot.owns_agents for slot in slots)  # AgentChat's embedded runtime, its own agents
    assert _participants(slots[0])[0].name == "helper" and _participants(slots[0])[0] is not _participants(slots[1])[0]
    assert factory.model_clients == []


def test_team_factory_names_the_provider_that_broke() -> None:
    broken = _component().model_dump()
    broken["config"]["participants"][1]["config"]["model_client"]["provider"] = "no_such_package.Client"
    with pytest.raises(TeamLoadError, match=r"cannot load team broken\.json: provider 'no_such_package\.Client' \(replay_chat_completion_client\) cannot be imported"):
        TeamFactory(ComponentModel.model_validate(broken), origin="broken.json")
    bad_field = _component().model_dump()
    bad_field["config"]["participants"][0]["config"]["max_reasoning_chars"] = -1
    with pytest.raises(TeamLoadError, match=r"provider 'duet\.agents\.ReasoningAgent' \(agent\) failed to load"):
        TeamFactory(ComponentModel.model_validate(bad_field))
