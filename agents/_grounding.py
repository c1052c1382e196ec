"""Search before thinking: service tools run on the user's question before the reasoner starts.

A reasoning model such as DeepSeek-R1 cannot call tools, so on a question that needs fresh facts it
reasons from what it remembers. The :class:`GroundingAgent` goes first in the team: it runs the
pipeline's grounding tools (any service tool: a Python function, an HTTP tool such as Tavily's or a
SearXNG instance's search, an MCP tool) on the last user text, concurrently and each within a
timeout, and hands the results on as *retrieved context* to the reasoner and the answer model
(:func:`retrieved_context`). The client sees progress and a short digest in the reasoning stream.
A failed or slow search never fails the request: the reasoning goes on, the failure is noted. The
results are part of the round's hidden part: a follow-up that only brings tool results does not
search again (with ``when: new_user_message``, the default), it gets them back from the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncGenerator, Literal, Mapping, Sequence
from urllib.parse import urlsplit

from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken, Component, ComponentModel
from autogen_core.models import ChatCompletionClient, UserMessage
from autogen_core.tools import ToolSchema, Workbench
from pydantic import BaseModel, Field
from typing_extensions import Self

from duet.workbenches import DuetWorkbench

from duet.agents._base import DuetAgent
from duet.agents._cancellation import child_token, unlink_child
from duet.agents._conversation import last_user_text
from duet.agents._events import DuetEvent, ReasoningDelta
from duet.agents._messages import grounding_reply, read_task
from duet.agents._run import DuetRun

logger = logging.getLogger(__name__)

GroundingWhen = Literal["new_user_message", "no_client_tools", "always"]

DEFAULT_GROUNDING_WHEN: GroundingWhen = "new_user_message"
"""Search when a round brings a new user message; a follow-up with tool results keeps the round's results."""
DEFAULT_GROUNDING_TIMEOUT = 10.0
"""Seconds a search may take: a person waits for the reasoning to start meanwhile."""
DEFAULT_GROUNDING_MAX_CHARS = 6000
"""About 1.5k tokens of results: enough for a handful of sources, small beside a 16k-32k context."""

LAST_USER_TEXT = "{last_user_text}"
"""The placeholder of an ``arguments`` template that stands for the last user text."""

RETRIEVED_CONTEXT = (
    "Retrieved context: search results fetched for the user's latest message before you started. They may be "
    "incomplete or wrong; prefer them over your memory for recent facts, and name the sources you use.\n"
    "<retrieved_context>\n{context}\n</retrieved_context>"
)


def retrieved_context(context: str) -> str:
    """The grounding results as the reasoner and the answer model read them, marked as retrieved
    context ('' when there are none): the one home of that wording."""
    return RETRIEVED_CONTEXT.format(context=context) if context else ""


class GroundingAgentOptions(BaseModel):
    """What grounding does: the fields of the agent's config and the YAML ``grounding:`` section."""

    tools: list[str] = Field(min_length=1, description="Names of the pipeline's service tools to run before the reasoner.")
    arguments: dict[str, Any] | None = Field(
        None,
        description="The tools' arguments; '{last_user_text}' in a string value is replaced by the last user text. "
        "Default: the last user text as each tool's first required string argument.",
    )
    when: GroundingWhen = Field(
        DEFAULT_GROUNDING_WHEN,
        description="new_user_message: rounds that bring a new user message; no_client_tools: those rounds when "
        "the client sent no tools; always: every round.",
    )
    timeout: float = Field(DEFAULT_GROUNDING_TIMEOUT, gt=0, description="Seconds each tool may take.")
    max_chars: int = Field(DEFAULT_GROUNDING_MAX_CHARS, ge=1, description="Most characters of results passed on.")


class GroundingAgentConfig(GroundingAgentOptions):
    """The grounding agent as a component: its name and description, its options, and (outside a
    served request, e.g. in AutoGen Studio) the workbench whose tools it runs."""

    name: str
    description: str
    workbench: ComponentModel | None = None


class GroundingAgent(DuetAgent, Component[GroundingAgentConfig]):
    """Runs search tools on the user's question before the reasoner thinks; calls no model.

    Its reply is the retrieved context (a ``TextMessage`` marked as grounding, see
    :mod:`duet.agents._messages`), which the reasoning and the answer agent read.

    >>> grounder = GroundingAgent("grounder", tools=["web_search"])
    >>> grounder.dump_component().config["when"]
    'new_user_message'
    """

    component_config_schema = GroundingAgentConfig
    component_provider_override = "duet.agents.GroundingAgent"

    def __init__(
        self,
        name: str,
        *,
        tools: Sequence[str],
        arguments: Mapping[str, Any] | None = None,
        when: GroundingWhen = DEFAULT_GROUNDING_WHEN,
        timeout: float = DEFAULT_GROUNDING_TIMEOUT,
        max_chars: int = DEFAULT_GROUNDING_MAX_CHARS,
        description: str = "Searches for the user's question before the reasoning agent thinks.",
        workbench: Workbench | None = None,
    ) -> None:
        super().__init__(name, description, None, workbench=workbench)
        self._options = GroundingAgentOptions(tools=list(tools), arguments=dict(arguments) if arguments is not None else None,
                                              when=when, timeout=timeout, max_chars=max_chars)

    async def _turn(
        self, messages: Sequence[BaseChatMessage], run: DuetRun | None, cancellation_token: CancellationToken
    ) -> AsyncGenerator[DuetEvent | Response, None]:
        conversation, _ = read_task(messages)
        workbench = self._workbench_for(run)
        query = last_user_text(conversation).strip()
        if workbench is None or not query or not self._due(conversation, workbench):
            yield Response(chat_message=grounding_reply(self.name, ""))
            return
        schemas = {schema["name"]: schema for schema in await workbench.list_tools()}
        names = self._options.tools
        yield ReasoningDelta(text=f"[searching: {_preview(query, 120)}]", source=self.name)
        outcomes = await asyncio.gather(
            *(self._search(workbench, name, self._arguments(schemas.get(name), query), cancellation_token) for name in names)
        )
        sections: list[str] = []
        for name, (text, failure) in zip(names, outcomes, strict=True):
            if failure is not None:
                logger.warning("grounding tool %s failed: %s", name, failure)
                yield ReasoningDelta(text=f"\n[{name} failed: {failure}; reasoning goes on without it]", source=self.name)
                sections.append(f"{name}: no results ({failure}).")
                continue
            context, digest = read_results(text)
            yield ReasoningDelta(text=f"\n[{name}: {digest}]", source=self.name)
            sections.append(f"Results of {name}:\n{context}")
        yield Response(chat_message=grounding_reply(self.name, capped("\n\n".join(sections), self._options.max_chars)))

    def _due(self, conversation: Sequence[Any], workbench: Workbench) -> bool:
        """Whether this round searches (see ``when``)."""
        when = self._options.when
        if when == "always":
            return True
        if not conversation or not isinstance(conversation[-1], UserMessage):
            return False  # a follow-up with tool results: the round's results come back with its hidden part
        if when == "no_client_tools":
            return not (isinstance(workbench, DuetWorkbench) and len(workbench.service_tools) < len(workbench.tools))
        return True

    def _arguments(self, schema: ToolSchema | None, query: str) -> dict[str, Any]:
        """The tool's arguments: the template with the query in it, or the query as the tool's first
        required string parameter (``query`` when the schema names none)."""
        if self._options.arguments is not None:
            return {key: _fill(value, query) for key, value in self._options.arguments.items()}
        parameters: Mapping[str, Any] = (schema.get("parameters") if schema else None) or {}
        properties: Mapping[str, Any] = parameters.get("properties") or {}
        strings = [name for name, spec in properties.items() if isinstance(spec, Mapping) and spec.get("type") == "string"]
        required = [name for name in parameters.get("required") or [] if name in strings]
        return {(required or strings or ["query"])[0]: query}

    async def _search(
        self, workbench: Workbench, name: str, arguments: dict[str, Any], cancellation_token: CancellationToken
    ) -> tuple[str, str | None]:
        """One tool's result text, or why there is none. Never raises but for the request's cancellation."""
        if isinstance(workbench, DuetWorkbench) and workbench.client_tool(name) is not None:
            return "", "it is a client tool, and grounding runs only service tools"
        call_token = child_token(cancellation_token)  # stopped at the timeout, or with the request
        try:
            async with asyncio.timeout(self._options.timeout):
                result = await workbench.call_tool(name, arguments, call_token)
        except TimeoutError:
            call_token.cancel()
            return "", f"no answer within {self._options.timeout:g} s"
        finally:
            unlink_child(cancellation_token, call_token)
        text = result.to_text()
        if result.is_error or _error_body(text):
            return "", _preview(text, 200)
        return text, None

    def _to_config(self) -> GroundingAgentConfig:
        return GroundingAgentConfig(
            name=self.name,
            description=self.description,
            workbench=self._workbench.dump_component() if self._workbench is not None else None,
            **self._options.model_dump(),
        )

    @classmethod
    def _from_config(cls, config: GroundingAgentConfig, model_client: ChatCompletionClient | None = None) -> Self:
        workbench = Workbench.load_component(config.workbench) if config.workbench is not None else None
        options = GroundingAgentOptions.model_validate(config.model_dump(include=set(GroundingAgentOptions.model_fields)))
        return cls(config.name, description=config.description, workbench=workbench, **dict(options))


def _fill(value: Any, query: str) -> Any:
    if isinstance(value, str):
        return value.replace(LAST_USER_TEXT, query)
    if isinstance(value, list):
        return [_fill(item, query) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, query) for key, item in value.items()}
    return value


def _error_body(text: str) -> bool:
    """An HTTP tool hands on an error status's body as its result: a JSON error object without
    results (Tavily's ``{"detail": {"error": ...}}``, OpenAI-style ``{"error": ...}``) is a failed search."""
    if not text.startswith("{"):
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and "results" not in data and bool(data.get("error") or data.get("detail"))


def _preview(text: str, size: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


def capped(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, saying so.

    >>> capped("abcdefghij", 5)
    'abcde\\n[… cut at 5 characters]'
    """
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[… cut at {max_chars} characters]"


def read_results(text: str) -> tuple[str, str]:
    """A search tool's answer as retrieved context (each source numbered, with its title and URL)
    and a one-line digest. Reads the shape Tavily's and SearXNG's JSON share (``results``: objects
    with ``title``, ``url`` and ``content``, and Tavily's optional ``answer``); any other answer is
    passed on as text.

    >>> context, digest = read_results('{"results": [{"title": "Duet", "url": "https://example.org/duet", "content": "A pair."}]}')
    >>> print(context)
    [1] Duet — https://example.org/duet
    A pair.
    >>> digest
    '1 result: Duet (example.org)'
    """
    data = _search_answer(text)
    if data is None:
        return text.strip(), f"{len(text)} characters: {_preview(text, 80)}"
    results = data["results"]
    lines: list[str] = []
    answer = data.get("answer")
    if isinstance(answer, str) and answer.strip():
        lines.append(f"Answer: {answer.strip()}")
    titles: list[str] = []
    for number, item in enumerate(results, 1):
        source, title = _source(number, item)
        lines.append(source)
        titles.append(title)
    count = f"{len(results)} result" + ("" if len(results) == 1 else "s")
    digest = count + (": " + "; ".join(titles[:3]) + ("; …" if len(titles) > 3 else "") if titles else "")
    return "\n\n".join(lines), digest


def _search_answer(text: str) -> dict[str, Any] | None:
    """The answer as JSON in the shape Tavily's and SearXNG's share (a list of objects as ``results``), else ``None``."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not all(isinstance(item, dict) for item in results):
        return None
    return data


def _source(number: int, item: dict[str, Any]) -> tuple[str, str]:
    """One result as a numbered source (title, URL, content), and its title for the digest (with its host)."""
    title = str(item.get("title") or "untitled").strip()
    url = str(item.get("url") or "").strip()
    content = str(item.get("content") or item.get("snippet") or "").strip()
    source = f"[{number}] {title}" + (f" — {url}" if url else "") + (f"\n{content}" if content else "")
    host = urlsplit(url).hostname if url else None
    return source, f"{_preview(title, 60)} ({host})" if host else _preview(title, 60)
