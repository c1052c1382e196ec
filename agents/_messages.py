"""The messages the driver (:class:`~duet.agents.Duet`) and the two agents exchange: built and read here only.

A run of the team carries five kinds of message, all stock AgentChat messages (AutoGen Studio
shows them; a team run outside Duet reads them as any other):

- the **task**, from the pseudo-agent :data:`CLIENT`: a ``HandoffMessage`` whose ``context`` is
  the whole conversation (:func:`task_messages`, read by :func:`read_task`), followed on a
  follow-up round by the reasoning that round was started with;
- the **grounding reply** of the grounding agent, when the pipeline has one: the retrieved context
  (:func:`grounding_reply`), which both other agents read as such; a follow-up's task carries the
  context its round was answered with;
- the **reasoning reply** of the reasoning agent: a ``TextMessage`` marked as reasoning
  (:func:`reasoning_reply`), which the answer agent reads as reasoning, not as conversation;
- the **answer reply** of the answer agent: a ``TextMessage`` carrying its finish reason
  (:func:`answer_reply`);
- the **client handoff**: the answer agent hands client tool calls to :data:`CLIENT`; its
  ``context`` is the part of the turn the client does not see (:func:`client_handoff`);
- the **failure**: an agent whose model failed ends the team with a handoff to :data:`CLIENT`
  marked as failed (:func:`failure_reply`). A handoff to the client is what ends every Duet team,
  team files exported by older versions included; the failure itself went out as an event.

The driver classifies what the team yields with :func:`read_reply`.

>>> from autogen_core.models import UserMessage
>>> task = task_messages([UserMessage(content="Hi", source="user")], earlier_reasoning="Greet back.")
>>> read_task(task)[1]
'Greet back.'
>>> read_reply(answer_reply(ANSWERER_NAME, "Hello!", "stop"))
AnswerReply(text='Hello!', finish_reason='stop')
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any, Sequence, get_args

from autogen_agentchat.messages import (
    BaseAgentEvent,
    BaseChatMessage,
    HandoffMessage,
    ModelClientStreamingChunkEvent,
    TextMessage,
    ToolCallRequestEvent,
)
from autogen_core import FunctionCall
from autogen_core.models import LLMMessage, RequestUsage

from duet._fields_set import share_fields_set
from duet.agents._conversation import last_user_text
from duet.agents._ids import new_message_id
from duet.agents._names import ANSWERER_NAME  # noqa: F401 - the module docstring's example uses it
from duet.agents._names import CLIENT, GROUNDER_NAME, REASONER_NAME, TEAM_NAME
from duet.agents._events import ContentDelta, DuetEvent, FinishReason, ReasoningDelta, ToolCallsRequested


_KIND = "duet"  # the metadata key that marks Duet's own messages
_REASONING = {_KIND: "reasoning"}
_GROUNDING = {_KIND: "grounding"}
_FAILED = {_KIND: "failed"}
_FINISH_REASON = "finish_reason"
_FINISH_REASONS = frozenset(get_args(FinishReason))


@dataclass(frozen=True, slots=True)
class ReasoningReply:
    """The reasoning agent's reasoning (empty when it did not reason on this round)."""

    text: str


@dataclass(frozen=True, slots=True)
class GroundingReply:
    """The grounding agent's retrieved context (empty when it did not search on this round)."""

    text: str


@dataclass(frozen=True, slots=True)
class AnswerReply:
    """The answer agent's reply and why its model stopped."""

    text: str
    finish_reason: FinishReason


@dataclass(frozen=True, slots=True)
class ClientHandoff:
    """The answer agent handed client tool calls to the client. ``turn`` is what its turn added to
    the conversation: every round's calls and the results known here (the client sees only its calls)."""

    turn: list[LLMMessage]


@dataclass(frozen=True, slots=True)
class FailureReply:
    """An agent failed and ended the team; the failure already went to the caller as an event."""

    text: str


Reply = GroundingReply | ReasoningReply | AnswerReply | ClientHandoff | FailureReply


def task_messages(
    conversation: list[LLMMessage], earlier_reasoning: str | None = None, grounding: str = ""
) -> list[BaseChatMessage]:
    """The task a run hands the team: the conversation in a handoff from :data:`CLIENT`, and the
    reasoning the tool round being continued was answered with, when it was restored (``None``: not
    restored; an empty text: restored, the round was answered without reasoning), and the retrieved
    context that round was answered with."""
    # A copy of a message made once: the conversation is made of validated LLMMessages already, and
    # re-validating a long conversation (or model_construct's pass over the fields) would cost every request.
    handoff = _TASK_HANDOFF.model_copy(update={"content": last_user_text(conversation) or "(continue)", "context": conversation,
                                               **_unset_fields()})
    task: list[BaseChatMessage] = [share_fields_set(handoff, _TASK_HANDOFF.__pydantic_fields_set__)]  # kept as long as the stream
    if grounding:
        task.append(grounding_reply(GROUNDER_NAME, grounding))
    if earlier_reasoning is not None:
        task.append(reasoning_reply(REASONER_NAME, earlier_reasoning))
    return task


def restores_reasoning(messages: Sequence[BaseChatMessage]) -> bool:
    """True when a task carries the restored reasoning of the tool round it continues.

    >>> from autogen_core.models import UserMessage
    >>> conversation = [UserMessage(content="Hi", source="user")]
    >>> restores_reasoning(task_messages(conversation)), restores_reasoning(task_messages(conversation, ""))
    (False, True)
    """
    return any(message.metadata.get(_KIND) == "reasoning" for message in messages)


def carries_task(messages: Sequence[BaseChatMessage]) -> bool:
    """True when ``messages`` hold a Duet task (which needs its run bound: see :func:`~duet.agents._run.bind_run`)."""
    return any(isinstance(message, HandoffMessage) and message.source == CLIENT for message in messages)


def read_task(messages: Sequence[BaseChatMessage]) -> tuple[list[LLMMessage], str]:
    """The conversation and the reasoning in what the team delivered to an agent.

    A Duet task gives the conversation in its handoff's ``context``; anything else (a task typed
    in AutoGen Studio, another agent's reply) is read the way AgentChat agents read it.
    """
    conversation: list[LLMMessage] = []
    reasoning: list[str] = []
    for message in messages:
        if isinstance(message, HandoffMessage) and message.source == CLIENT:
            conversation.extend(message.context)
        elif message.metadata.get(_KIND) == "reasoning":
            if isinstance(message, TextMessage) and message.content:
                reasoning.append(message.content)
        elif message.metadata.get(_KIND) == "grounding":
            continue  # retrieved context, not conversation: read_grounding
        else:
            conversation.append(message.to_model_message())
    return conversation, "\n\n".join(reasoning)


def read_grounding(messages: Sequence[BaseChatMessage]) -> str:
    """The retrieved context in what the team delivered to an agent ('' when there is none)."""
    return "\n\n".join(
        message.content for message in messages
        if isinstance(message, TextMessage) and message.metadata.get(_KIND) == "grounding" and message.content
    )


def _unset_fields() -> dict[str, Any]:
    """The fields of an AgentChat message that Duet does not set, given so that no default is
    computed: pydantic inspects a default factory's signature for every ``model_construct``, and
    AgentChat draws each id from ``uuid4``."""
    return {"id": new_message_id(), "created_at": datetime.now(UTC), "models_usage": None, "metadata": {}}


_TASK_HANDOFF = HandoffMessage.model_construct(source=CLIENT, target=TEAM_NAME, content="", context=[], **_unset_fields())
"""What :func:`task_messages` copies: the handoff from the client to the team, its content and context to fill in."""


def grounding_reply(source: str, text: str) -> TextMessage:
    """The grounding agent's reply: the retrieved context, marked so the other agents read it as such."""
    return TextMessage(id=new_message_id(), source=source, content=text, metadata=_GROUNDING)


def reasoning_reply(source: str, text: str, usage: RequestUsage | None = None) -> TextMessage:
    """The reasoning agent's reply: its reasoning, marked so the answer agent reads it as such."""
    reply = TextMessage(id=new_message_id(), source=source, content=text, metadata=_REASONING, models_usage=usage)
    return share_fields_set(reply, _REPLY_FIELDS)  # kept for the rest of the stream (the team's thread)


def answer_reply(source: str, text: str, finish_reason: FinishReason, usage: RequestUsage | None = None) -> TextMessage:
    """The answer agent's reply, with the finish reason the client gets."""
    reply = TextMessage(id=new_message_id(), source=source, content=text, metadata={_FINISH_REASON: finish_reason}, models_usage=usage)
    return share_fields_set(reply, _REPLY_FIELDS)


_REPLY_FIELDS = {"id", "source", "content", "metadata", "models_usage"}
"""The fields a reply is given: one set of them for every reply (see :mod:`duet._fields_set`)."""


def client_handoff(source: str, calls: Sequence[FunctionCall], turn: list[LLMMessage], usage: RequestUsage) -> HandoffMessage:
    """The answer agent's handoff of client tool ``calls`` to :data:`CLIENT`; ``turn`` (the part of
    the turn the client does not see besides its calls) is kept by Duet for the follow-up."""
    # Built, not validated: the turn holds messages this process built and validated.
    return _built_handoff({
        "id": new_message_id(), "created_at": datetime.now(UTC), "metadata": {}, "models_usage": usage, "source": source,
        "target": CLIENT, "content": f"{source} asks the client to run {', '.join([call.name for call in calls])}.", "context": turn,
    })


def _built_handoff(fields: dict[str, Any]) -> HandoffMessage:
    """A ``HandoffMessage`` of ``fields`` (all of :data:`_TASK_HANDOFF`'s given fields), not validated,
    as ``model_construct`` builds it, without its walk over the model's fields and their defaults (some
    twenty Python calls): the task handoff's ``__dict__`` copied, ``fields`` over it; its set of given
    fields shared (see :mod:`duet._fields_set`). HandoffMessage has no extra and no private attributes;
    tests/unit/agents/test_messages.py pins that this matches ``model_construct``."""
    message = HandoffMessage.__new__(HandoffMessage)
    object.__setattr__(message, "__dict__", {**_TASK_HANDOFF.__dict__, **fields})
    object.__setattr__(message, "__pydantic_fields_set__", _TASK_HANDOFF.__pydantic_fields_set__)
    object.__setattr__(message, "__pydantic_extra__", None)
    object.__setattr__(message, "__pydantic_private__", None)
    return message


def failure_reply(source: str, error: BaseException) -> HandoffMessage:
    """How an agent whose model failed ends the team (a handoff to :data:`CLIENT`, which ends every
    Duet team) while the team stays healthy for its next run."""
    return HandoffMessage(id=new_message_id(), source=source, target=CLIENT, content=f"{source} failed: {error}", metadata=_FAILED)


def read_reply(message: object) -> Reply | None:
    """What a message the team yielded says to the driver; ``None`` for anything else (another
    agent's message, an event, the final ``TaskResult``)."""
    if isinstance(message, TextMessage):
        if message.metadata.get(_KIND) == "reasoning":
            return ReasoningReply(message.content)
        if message.metadata.get(_KIND) == "grounding":
            return GroundingReply(message.content)
        reason = message.metadata.get(_FINISH_REASON)
        if reason is not None:
            return AnswerReply(message.content, reason if reason in _FINISH_REASONS else "stop")  # type: ignore[arg-type]
    elif isinstance(message, HandoffMessage) and message.target == CLIENT:
        if message.metadata.get(_KIND) == "failed":
            return FailureReply(message.content)
        return ClientHandoff(message.context)
    return None


def as_agentchat_event(event: DuetEvent, source: str) -> BaseAgentEvent | None:
    """A Duet event as the stock AgentChat event an agent yields outside a Duet run (what AutoGen
    Studio shows): reasoning and content as streaming chunks, client tool calls as a request event."""
    if isinstance(event, ReasoningDelta):
        return ModelClientStreamingChunkEvent(content=event.text, source=source, metadata=_REASONING)
    if isinstance(event, ContentDelta):
        return ModelClientStreamingChunkEvent(content=event.text, source=source)
    if isinstance(event, ToolCallsRequested):
        calls = [FunctionCall(id=call.id, name=call.name, arguments=call.arguments) for call in event.calls]
        return ToolCallRequestEvent(content=calls, source=source)
    return None
