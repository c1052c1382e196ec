"""Running the duet on one conversation: the code path the HTTP service and Python scripts share."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

from autogen_agentchat.base import Team
from autogen_agentchat.messages import HandoffMessage, TextMessage
from autogen_core import CancellationToken, ComponentModel
from autogen_core.models import ChatCompletionClient, LLMMessage
from autogen_core.tools import BaseTool
from pydantic import BaseModel

from workbenches import DuetWorkbench, ProxyTool, proxy_tools_from_openai

from .answer_agent import AnswerAgent, AnswerAgentConfig
from .base import CLIENT, workbench_from_config
from .conversation import conversation_from_openai, last_user_text
from .events import ContentDelta, DuetEvent, Failed, Finished, FinishReason, ReasoningDelta, ToolCall, ToolCallsRequested, Usage
from .model_client import ANSWER_MODEL_INFO
from .run_context import AnswerOptions, DuetRun, bind_run
from .settings import REASONER_MODEL_INFO, PipelineSettings, ReasoningOutput
from .team import build_team

logger = logging.getLogger(__name__)

_END_KINDS = ("done", "error")


class DuetResult(BaseModel):
    """A whole run, collected: what a non-streaming caller gets."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason = "stop"


class TeamPool:
    """Idle teams of one pipeline. AgentChat teams hold per-run state and refuse concurrent runs,
    so each request leases its own; a team that finished cleanly is reset and reused, which
    keeps its agents' model clients (and their connection pools) alive."""

    def __init__(self, factory: Callable[[], Team], max_idle: int = 64) -> None:
        self._factory = factory
        self._idle: list[Team] = []
        self._max_idle = max_idle

    def acquire(self) -> Team:
        return self._idle.pop() if self._idle else self._factory()

    async def release(self, team: Team, reusable: bool) -> None:
        if not reusable or len(self._idle) >= self._max_idle:
            return
        try:
            await team.reset()
        except Exception:  # a team that cannot reset is dropped, not reused
            logger.exception("dropping a team that failed to reset")
            return
        self._idle.append(team)


class Duet:
    """A pipeline ready to run: a team of a :class:`ReasoningAgent` and an :class:`AnswerAgent` (or a
    team file), the service's own tools, and how reasoning is shown.

    Build it from settings or a team file, then run it on an OpenAI-style conversation::

        duet = Duet.from_settings(PipelineSettings(answer=AnswerSettings(model="qwen2.5"), reasoner=...))
        async for event in duet.stream([{"role": "user", "content": "Hi"}], tools=openai_tools):
            print(event)

    Each run leases a team, binds the request (events sink, the request's workbench with the
    client's tools as :class:`~workbenches.ProxyTool` objects, the answer options) and runs the
    team on its AutoGen runtime.
    """

    def __init__(
        self,
        team_factory: Callable[[], Team],
        *,
        name: str = "duet",
        service_tools: Sequence[BaseTool[Any, Any]] = (),
        reasoning_output: ReasoningOutput = "reasoning_content",
        model_clients: Sequence[ChatCompletionClient] = (),
        max_idle_teams: int = 64,
    ) -> None:
        self.name = name
        self.reasoning_output: ReasoningOutput = reasoning_output
        self._team_factory = team_factory
        self._pool = TeamPool(team_factory, max_idle_teams)
        self._service_tools = list(service_tools)
        self.service_tool_names = {tool.name for tool in self._service_tools}
        self._model_clients = list(model_clients)

    @classmethod
    def from_settings(cls, settings: PipelineSettings, *, service_tools: Sequence[BaseTool[Any, Any]] = ()) -> "Duet":
        """Creates the pipeline's model clients once; every team it runs shares them."""
        answer_client = settings.answer.build_client(ANSWER_MODEL_INFO)
        reasoner_client = settings.reasoner.build_client(REASONER_MODEL_INFO) if settings.reasoner else None
        clients = [c for c in (answer_client, reasoner_client) if c is not None]
        return cls(
            lambda: build_team(settings, answer_client, reasoner_client),
            name=settings.name,
            service_tools=service_tools,
            reasoning_output=settings.reasoning_output,
            model_clients=clients,
        )

    @classmethod
    def from_team(
        cls,
        team: ComponentModel | Mapping[str, Any] | str | Path,
        *,
        name: str = "duet",
        reasoning_output: ReasoningOutput = "reasoning_content",
    ) -> "Duet":
        """Serves a team component (a dict, a ``ComponentModel`` or a JSON file path), e.g. one
        exported by ``duet export-team`` or edited in AutoGen Studio.

        The team is loaded once here, so a broken file fails at startup, naming the provider
        that could not be loaded. The client tools of each request join the team's service tools
        (the non-client tools of its answer agent).
        """
        config = load_team_config(team)
        prototype = Team.load_component(config)
        service_tools = _service_tools_of(config)
        spare = [prototype]

        def factory() -> Team:
            return spare.pop() if spare else Team.load_component(config)

        return cls(factory, name=name, service_tools=service_tools, reasoning_output=reasoning_output)

    def new_team(self) -> Team:
        """A fresh team of this pipeline, e.g. to run it with AgentChat directly or to dump it."""
        return self._team_factory()

    async def stream(
        self,
        messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage],
        *,
        tools: Sequence[Mapping[str, Any]] | Sequence[ProxyTool] = (),
        options: AnswerOptions | None = None,
        request_id: str | None = None,
        user: str | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncIterator[DuetEvent]:
        """Runs the duet once. Yields :mod:`agents.events`, ending with ``Finished`` or ``Failed``.

        ``messages`` is an OpenAI ``messages`` list (or AutoGen ``LLMMessage`` objects); ``tools``
        an OpenAI ``tools`` list (or :class:`ProxyTool` objects). Closing the iterator early, or
        cancelling ``cancellation_token``, stops every model call of the run.
        """
        if messages and isinstance(messages[0], Mapping):
            conversation = conversation_from_openai(messages)  # type: ignore[arg-type]
        else:
            conversation = list(messages)  # type: ignore[arg-type]
        proxies = [t if isinstance(t, ProxyTool) else None for t in tools]
        client_tools = proxies if all(proxies) else proxy_tools_from_openai(tools)  # type: ignore[arg-type]
        queue: asyncio.Queue[DuetEvent] = asyncio.Queue()
        run = DuetRun(
            emit=queue.put_nowait,
            workbench=DuetWorkbench.for_request(self._service_tools, client_tools),  # type: ignore[arg-type]
            options=options or AnswerOptions(),
            request_id=request_id or uuid.uuid4().hex,
            user=user,
            pipeline=self.name,
        )
        token = cancellation_token or CancellationToken()
        team = self._pool.acquire()
        task = HandoffMessage(
            source=CLIENT, target=team.name, content=last_user_text(conversation) or "(continue)", context=conversation
        )
        driver = asyncio.create_task(self._drive(team, run, task, token))
        try:
            while True:
                event = await queue.get()
                yield event
                if event.kind in _END_KINDS:
                    return
        finally:
            if not driver.done():
                token.cancel()
                try:
                    await asyncio.wait_for(asyncio.shield(driver), timeout=10)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    driver.cancel()

    async def run(self, messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage], **kwargs: Any) -> DuetResult:
        """Like :meth:`stream`, collected into one :class:`DuetResult`. Raises the run's error."""
        result = DuetResult()
        reasoning: list[str] = []
        content: list[str] = []
        async for event in self.stream(messages, **kwargs):
            if isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                content.append(event.text)
            elif isinstance(event, ToolCallsRequested):
                result.tool_calls.extend(event.calls)
            elif isinstance(event, Usage):
                result.prompt_tokens += event.prompt_tokens
                result.completion_tokens += event.completion_tokens
            elif isinstance(event, Finished):
                result.finish_reason = event.finish_reason
            elif isinstance(event, Failed):
                raise event.error
        result.reasoning = "".join(reasoning)
        result.content = "".join(content)
        return result

    async def _drive(self, team: Team, run: DuetRun, task: HandoffMessage, token: CancellationToken) -> None:
        bind_run(run)  # this task's context; the team's runtime, started below, inherits it
        reusable = False
        finish_reason: FinishReason = "stop"
        try:
            async for message in team.run_stream(task=task, cancellation_token=token):
                if isinstance(message, HandoffMessage) and message.target == CLIENT:
                    finish_reason = "tool_calls"
                elif isinstance(message, TextMessage) and "finish_reason" in message.metadata:
                    finish_reason = message.metadata["finish_reason"]  # type: ignore[assignment]
            run.emit(Finished(finish_reason=finish_reason))
            reusable = True
        except asyncio.CancelledError:
            if not token.is_cancelled():
                raise
        except Exception as exc:  # an agent already reported its own failure; this covers the rest
            run.emit(Failed(message=str(exc), error=exc))
        finally:
            await self._pool.release(team, reusable)

    async def close(self) -> None:
        """Closes the model clients this pipeline created."""
        for client in self._model_clients:
            await client.close()


def load_team_config(team: ComponentModel | Mapping[str, Any] | str | Path) -> ComponentModel:
    if isinstance(team, ComponentModel):
        return team
    if isinstance(team, (str, Path)):
        team = json.loads(Path(team).read_text())
    return ComponentModel.model_validate(team)


def _service_tools_of(team: ComponentModel) -> list[BaseTool[Any, Any]]:
    """The tools a served team file brings itself: its answer agent's non-client tools, loaded
    once for the pipeline (client tools come from each request instead)."""
    for participant in team.config.get("participants", []):
        if ComponentModel.model_validate(participant).provider == AnswerAgent.component_provider_override:
            workbench = workbench_from_config(AnswerAgentConfig.model_validate(participant["config"]))
            if isinstance(workbench, DuetWorkbench):
                return workbench.service_tools
    return []
