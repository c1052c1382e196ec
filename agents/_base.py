"""What the reasoning agent and the answer agent have in common."""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from typing import Any, AsyncGenerator, Sequence

from autogen_agentchat.agents import BaseChatAgent
from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, HandoffMessage, TextMessage
from autogen_core import CancellationToken, ComponentModel
from autogen_core.models import ChatCompletionClient, LLMMessage
from autogen_core.tools import BaseTool, Workbench
from pydantic import BaseModel, Field

from duet.workbenches import DuetWorkbench

from duet.agents._errors import DuetError, UpstreamError, is_openai_error, upstream_error_from_openai
from duet.agents._events import DuetEvent, Failed
from duet.agents._messages import as_agentchat_event, carries_task, failure_reply
from duet.agents._observe import Stage, observe_model_call, observer_of
from duet.agents._run import DuetRun, RunNotBoundError, current_run

logger = logging.getLogger(__name__)


class DuetAgentOptions(BaseModel):
    """What both agents take besides a name, a model client and tools: the fields their configs and
    the YAML settings of each part (``reasoner:``, ``answer:``) share."""

    system_message: str | None = None


class DuetAgentConfig(DuetAgentOptions):
    """Fields both agents serialise. Tools go under ``tools`` (what AutoGen Studio's UI shows) or
    under ``workbench``; both load into one :class:`~duet.workbenches.DuetWorkbench`."""

    name: str
    description: str
    model_client: ComponentModel
    workbench: ComponentModel | None = None
    tools: list[ComponentModel] | None = Field(None, description="Tools as a flat list (AutoGen Studio shows these).")


def agent_arguments(config: DuetAgentConfig, model_client: ChatCompletionClient | None = None) -> dict[str, Any]:
    """The constructor arguments both agents' configs share: the model client (``model_client``
    instead of loading the config's, when a served pipeline shares one), the description, the
    system message, and the ``tools`` or ``workbench`` (each loaded once)."""
    arguments: dict[str, Any] = {
        "model_client": model_client or ChatCompletionClient.load_component(config.model_client),
        "description": config.description,
        "system_message": config.system_message,
    }
    if config.tools is not None:
        arguments["tools"] = [BaseTool.load_component(tool) for tool in config.tools]
    elif config.workbench is not None:
        arguments["workbench"] = Workbench.load_component(config.workbench)
    return arguments


def workbench_from_config(config: DuetAgentConfig) -> Workbench | None:
    """The workbench an agent config describes, whichever form it takes."""
    if config.tools is not None:
        return DuetWorkbench([BaseTool.load_component(tool) for tool in config.tools])
    if config.workbench is not None:
        return Workbench.load_component(config.workbench)
    return None


def estimate_tokens(messages: Sequence[LLMMessage]) -> int:
    """About four characters a token; used only when a model call was cut short by design."""
    return sum(len(str(message.content)) for message in messages) // 4


class DuetAgent(BaseChatAgent):
    """Runs one stage of the duet. Subclasses implement :meth:`_turn`, an async generator of Duet
    events ending with a ``Response``; this class routes the events to the request's sink (or, outside
    a request, yields them as AgentChat events) and reports failures to the request."""

    def __init__(
        self,
        name: str,
        description: str,
        model_client: ChatCompletionClient | None,
        *,
        system_message: str | None = None,
        workbench: Workbench | None = None,
        tools: Sequence[BaseTool[Any, Any]] | None = None,
    ) -> None:
        super().__init__(name, description)
        if workbench is not None and tools is not None:
            raise ValueError("give either workbench or tools, not both")
        self._model_client = model_client
        self._model_name: str | None = None  # what an observer is told the model calls ask for
        self._system_message = system_message
        self._tools_as_list = tools is not None
        self._workbench = DuetWorkbench(list(tools)) if tools is not None else workbench

    @property
    def model_client(self) -> ChatCompletionClient | None:
        """The agent's model client (``None`` for an agent that calls no model: the grounding agent)."""
        return self._model_client

    @property
    def workbench(self) -> Workbench | None:
        """The agent's own workbench; a Duet request brings its own, shared by both agents."""
        return self._workbench

    @property
    def produced_message_types(self) -> Sequence[type[BaseChatMessage]]:
        return (TextMessage, HandoffMessage)

    async def on_messages(self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken) -> Response:
        response: Response | None = None
        async for item in self.on_messages_stream(messages, cancellation_token):
            if isinstance(item, Response):
                response = item
        assert response is not None
        return response

    async def on_messages_stream(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> AsyncGenerator[BaseAgentEvent | BaseChatMessage | Response, None]:
        reply = await self.reply_in_run(messages, cancellation_token)
        if reply is not None:
            yield reply
            return
        if carries_task(messages):
            raise RunNotBoundError(
                f"{self.name} was handed a Duet task (the conversation in a handoff from the client) but no run is bound: "
                "run the team inside `with bind_run(run):` (Duet.start does), or give it a plain task"
            )
        try:  # a plain AgentChat run (AutoGen Studio): events and errors the AgentChat way
            async for item in self._turn(messages, None, cancellation_token):
                if isinstance(item, Response):
                    yield item
                else:
                    event = as_agentchat_event(item, self.name)
                    if event is not None:
                        yield event
        except UpstreamError as exc:
            exc.at_stage(self.name)  # the message now says which model failed: reasoning or answer
            raise

    async def reply_in_run(self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken) -> Response | None:
        """The turn's reply in a Duet run (its events went to the run's reader): all that
        :meth:`on_messages_stream` yields then, without a generator (a team's container awaits it, one
        async generator less per turn). ``None`` when no run is bound (the turn is then streamed)."""
        run = current_run()
        if run is None:
            return None
        ahead = run.take_head_start(self.name, messages)
        return await (ahead.response() if ahead is not None else self._emit_turn(messages, run, cancellation_token))

    async def _emit_turn(
        self, messages: Sequence[BaseChatMessage], run: DuetRun, cancellation_token: CancellationToken,
        first_event: asyncio.Future[None] | None = None,
    ) -> Response:
        """The agent's turn in a Duet run: its events go to the run's reader, and its reply comes back.
        ``first_event`` is done once the first event has been handed on."""
        response: Response | None = None
        turn = self._turn(messages, run, cancellation_token)
        try:
            item: DuetEvent | Response | None
            async for item in turn:
                if isinstance(item, Response):
                    response = item
                    continue
                if not run.emit(item):  # the reader is behind: read no further from the model until it catches up
                    await run.room()
                    if cancellation_token.is_cancelled():
                        # The reader is gone (a client that stopped reading, then hung up): what the model
                        # sent meanwhile is not worth parsing and rendering for nobody.
                        await turn.aclose()
                        raise asyncio.CancelledError()
                item = None  # handed on: not kept while the next one is awaited
                if first_event is not None:
                    _settle(first_event)
                    first_event = None
        except Exception as exc:
            if isinstance(exc, UpstreamError):
                exc.at_stage(self.name)  # the message now says which model failed: reasoning or answer
            # The failure goes to the caller as an event, and the agent ends the team with a handoff
            # to the client instead of raising: the team stays healthy for its next request, and
            # AutoGen's runtime does not log a traceback for an upstream's bad day.
            error: Exception = exc
            if is_openai_error(exc) and self._model_client is not None:  # AutoGen's stock client: the same errors as Duet's own
                converted = upstream_error_from_openai(exc, self._model_client.dump_component().config.get("model"))
                if converted is not None:
                    error = converted.at_stage(self.name)
            if isinstance(error, DuetError):  # an upstream failed: expected, not a bug
                sent_to = getattr(error, "base_url", None)  # the operator's log names the server; the client's answer does not
                logger.warning("%s failed in request %s: %s%s", self.name, run.request_id, error, f" ({sent_to})" if sent_to else "")
            else:
                logger.exception("%s failed in request %s", self.name, run.request_id)
            run.emit(Failed(message=str(error), error=error))
            return Response(chat_message=failure_reply(self.name, error))
        assert response is not None
        return response

    async def head_start(self, messages: Sequence[BaseChatMessage], run: DuetRun, cancellation_token: CancellationToken) -> None:
        """Starts this agent's turn on ``messages`` now, before the team hands them over (the run
        calls it for the team's first speaker): its model call goes out, and its first events reach the
        reader, before AgentChat routes the task here (the run waits for :meth:`_TurnAhead.under_way`). The team's turn then takes its reply
        (:meth:`DuetRun.take_head_start`); a turn no team took is stopped with the run."""
        self.start_turn_ahead(messages, run, cancellation_token)
        await asyncio.sleep(0)  # the turn begins (its request goes out) before the team's first step

    def start_turn_ahead(self, messages: Sequence[BaseChatMessage], run: DuetRun, cancellation_token: CancellationToken) -> None:
        """:meth:`head_start` without its wait: the turn's task is made, and begins at the loop's next pass
        (before any task made after it). Call it where the run is bound (the task copies the binding)."""
        loop = asyncio.get_running_loop()
        first_event = loop.create_future()
        turn = loop.create_task(self._emit_turn(messages, run, cancellation_token, first_event))
        ahead = _TurnAhead(turn, first_event)
        turn.add_done_callback(ahead.ended)  # a turn that ends before any event is under way too
        run.head_start(self.name, messages, ahead)

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        """Nothing to reset: every turn gets the whole conversation."""

    async def close(self) -> None:
        """Closes the agent's model client (as AssistantAgent does)."""
        if self._model_client is not None:
            await self._model_client.close()

    def _model_stream(self, stage: Stage, run: DuetRun | None, messages: Sequence[LLMMessage], **kwargs: Any) -> Any:
        """The model client's ``create_stream(messages, **kwargs)``, told to the run's observer as a ``stage`` call."""
        assert self._model_client is not None, "only an agent with a model client calls a model"
        stream = self._model_client.create_stream(messages, **kwargs)
        observer = observer_of(run)
        if observer is None:
            return stream
        return observe_model_call(observer, stage, self._model_label(), stream)

    def _model_label(self) -> str:
        """The model the agent's calls ask for."""
        model = self._model_name
        if model is None:  # Duet's client names it; AutoGen's keeps it in its config (dumped once)
            assert self._model_client is not None, "only an agent with a model client calls a model"
            model = getattr(self._model_client, "model", None)
            if not isinstance(model, str):
                model = str(self._model_client.dump_component().config.get("model", ""))
            self._model_name = model
        return model

    def _workbench_for(self, run: DuetRun | None) -> Workbench | None:
        return run.workbench if run is not None else self._workbench

    def _base_config(self) -> dict[str, Any]:
        assert self._model_client is not None, "the config of an agent with a model client"
        config: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "model_client": self._model_client.dump_component(),
            "system_message": self._system_message,
        }
        if self._tools_as_list and isinstance(self._workbench, DuetWorkbench):
            config["tools"] = [tool.dump_component() for tool in self._workbench.tools]
        elif self._workbench is not None:
            config["workbench"] = self._workbench.dump_component()
        return config

    @abstractmethod
    def _turn(
        self, messages: Sequence[BaseChatMessage], run: DuetRun | None, cancellation_token: CancellationToken
    ) -> AsyncGenerator[DuetEvent | Response, None]: ...


class _TurnAhead:
    """A turn started ahead of the team (:meth:`DuetAgent.head_start`)."""

    __slots__ = ("_task", "_first_event")

    def __init__(self, task: asyncio.Task[Response], first_event: asyncio.Future[None]) -> None:
        self._task = task
        self._first_event = first_event

    def ended(self, _: object) -> None:
        """The turn's done callback: a turn that ended (or was cancelled before it began) is under way
        too. A method of this object, not a closure: no function and cell more for every request."""
        _settle(self._first_event)

    async def under_way(self) -> None:
        """Returns once the turn has handed on its first event, or has ended."""
        if not self._first_event.done():
            await self._first_event

    async def response(self) -> Response:
        """The turn's reply, once it is done (cancelling the caller cancels the turn)."""
        return await self._task

    async def close(self) -> None:
        """Stops a turn no team took."""
        self._task.cancel()
        await asyncio.wait({self._task})  # a cancellation of the caller itself is not swallowed
        if not self._task.cancelled():
            self._task.exception()  # read: nobody else will


def _settle(first_event: asyncio.Future[None]) -> None:
    """Marks a turn's first event as handed on (once; a waiter that was cancelled cancelled it)."""
    if not first_event.done():
        first_event.set_result(None)
