"""What one run of the duet is asked: :class:`DuetRequest`, a request in the agents' own terms.

Every protocol's reader (Chat Completions, the Responses API, Anthropic Messages) builds one from its
wire format, and :meth:`Duet.start <duet.agents.pipeline.Duet.start>` takes it whole; a Python caller
builds one from OpenAI-style lists (:meth:`DuetRequest.of`, which ``Duet.start`` calls for it).
Nothing of HTTP is in it: no protocol, no stream flag, no response shape; the API keeps those in its
own envelope around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from autogen_core.models import LLMMessage
from duet.workbenches import ProxyTool, proxy_tools_from_openai

from duet.agents._conversation import conversation_from_openai
from duet.agents._options import AnswerOptions
from duet.agents.continuations._store import DEFAULT_OWNER


@dataclass(slots=True, eq=False)
class DuetRequest:
    """One run's request: the conversation, the client's tools, the answer model's options, who asks.

    ``owner`` is whose stored state the run reads and writes (the HTTP service passes its API key's
    id; runs from Python share the default owner); ``request_id`` the id the run goes by (what a
    service tool's ``_context`` and the logs see; a random one when ``None``).

    >>> request = DuetRequest.of([{"role": "user", "content": "Hi"}], tools=[
    ...     {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}])
    >>> type(request.conversation[0]).__name__, request.tools[0].name, request.options.tool_choice
    ('UserMessage', 'lookup', 'auto')
    """

    conversation: list[LLMMessage]
    tools: list[ProxyTool] = field(default_factory=list)
    options: AnswerOptions = field(default_factory=AnswerOptions)
    user: str | None = None
    owner: str = DEFAULT_OWNER
    request_id: str | None = None

    @classmethod
    def of(
        cls,
        messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage],
        *,
        tools: Sequence[Mapping[str, Any]] | Sequence[ProxyTool] = (),
        options: AnswerOptions | None = None,
        user: str | None = None,
        owner: str = DEFAULT_OWNER,
        request_id: str | None = None,
    ) -> "DuetRequest":
        """From an OpenAI ``messages`` list (or AutoGen ``LLMMessage`` objects) and an OpenAI ``tools``
        list (or :class:`~duet.workbenches.ProxyTool` objects). Raises
        :class:`~duet.agents.ConversationError` for messages the duet cannot use."""
        if messages and isinstance(messages[0], Mapping):
            conversation = conversation_from_openai(messages)  # type: ignore[arg-type]
        else:
            conversation = list(messages)  # type: ignore[arg-type]
        if not tools:
            client_tools: list[ProxyTool] = []
        elif all(isinstance(tool, ProxyTool) for tool in tools):
            client_tools = list(tools)  # type: ignore[arg-type]
        else:
            client_tools = proxy_tools_from_openai(tools)  # type: ignore[arg-type]
        return cls(conversation, client_tools, options or AnswerOptions(), user, owner, request_id)


class RequestFields(TypedDict, total=False):
    """The fields :meth:`DuetRequest.of` takes besides the messages (what ``Duet.start`` passes on)."""

    tools: Sequence[Mapping[str, Any]] | Sequence[ProxyTool]
    options: AnswerOptions | None
    user: str | None
    owner: str
    request_id: str | None
