"""Faces are contracts: each package's ``__all__`` is pinned here, name by name (a change to a face is
a change to this file, made on purpose); every name in it is importable from the package and named in
its docstring; every provider a team file may name loads; every exception Duet defines is a
``DuetError`` and has its place in the tree of :mod:`duet.agents._errors`."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import duet
from duet.agents import DuetError

FACES: dict[str, list[str]] = {
    "duet": [],
    "duet.agents": [
        "ANSWERER_NAME", "AnswerAgent", "AnswerOptions", "AnswerSettings", "CacheMark", "ContentDelta", "ConversationError",
        "DEFAULT_BASE_URL", "DEFAULT_PIPELINE_NAME", "DEFAULT_REASONING_OUTPUT", "Duet", "DuetError", "DuetEvent",
        "DuetRequest", "DuetResult", "DuetStream", "Failed", "FinishReason", "Finished", "GROUNDER_NAME", "GroundingAgent",
        "GroundingSettings", "ModelCallObserver", "ModelSettings", "OpenAICompatibleClient", "PipelineSettings",
        "REASONER_NAME", "ReasonerSettings", "ReasoningAgent", "ReasoningDelta", "ReasoningEffort", "ReasoningOutput", "ReasoningParagraphs",
        "ReusedReasoning", "RunNotBoundError", "RunObserver", "RunToken", "Stage", "StoreOutcome", "TeamLoadError", "ToolCall",
        "ToolCallObserver", "ToolCallsRequested", "UpstreamConnectionError", "UpstreamError", "UpstreamModelNotFound", "UpstreamProtocolError",
        "UpstreamStatusError", "UpstreamTimeout", "UpstreamUnreachable", "Usage", "UsageOrigin", "build_team", "cache_marks_from_openai",
        "conversation_from_openai",
        "export_team", "load_team", "load_team_config", "mask_secrets", "random_id", "register_secrets",
        "upstream_error_from_openai",
    ],
    "duet.agents.pipeline": [
        "Duet", "DuetResult", "DuetStream", "MAX_BUFFERED_EVENTS", "OldTeamFileWarning", "TeamFactory", "build_team",
        "export_team", "load_team", "load_team_config",
    ],
    "duet.agents.continuations": [
        "Continuation", "ContinuationStore", "DEFAULT_FAILOVER_WAIT", "DEFAULT_OWNER", "DEFAULT_REUSE_SECONDS", "DEFAULT_STATE_URL",
        "DEFAULT_STORE_TIMEOUT", "DEFAULT_TTL", "GuardedStore", "MemoryContinuationStore", "ReasoningLedger",
        "RedisContinuationStore", "SQLiteContinuationStore", "StoreOpenError", "StoreUnavailable", "check_state_url", "fingerprint",
        "open_store", "owned", "prefix_digests", "redacted_url", "splice", "tool_rounds",
    ],
    "duet.agents.upstream": [
        "ANSWER_MODEL_INFO", "CACHE_MARKS_ARG", "ModelClientOptions", "OpenAICompatibleClient", "OpenAICompatibleClientConfig",
        "ReasoningSplitter", "ReasoningText", "STREAMED_TEXT_UNKEPT_ARG", "UpstreamResult", "add_usage", "derived_cache_key", "streaming_create_args",
        "strip_think_blocks",
        "think_text",
    ],
    "duet.agents.runtime": ["HandOverQueue", "LeanAgentRuntime", "TeamRegistration", "lighten_queue", "noted_at_once"],
    "duet.workbenches": [
        "CachingToolSchema", "ClientSideToolError", "ContentCache", "DuetWorkbench", "FunctionToolSettings",
        "HttpServiceTool", "HttpToolSettings", "McpServer", "McpServerSettings", "McpServerTool", "McpServerUnavailable",
        "ProxyTool", "PythonFunctionTool", "RequestContext", "ServiceTools", "ToolsSettings", "content_key", "derived_from",
        "json_schema_problem", "model_safe_name", "parameters_problem", "proxy_tools_from_openai", "service_tool",
        "stop_shared_servers",
    ],
    "duet.api": [
        "ConfigError", "ConfigFile", "EnvSettings", "ServiceConfig", "TeamPipelineSettings", "configure_process",
        "create_app", "freeze_startup_objects", "main",
    ],
    "duet.api.chat": ["ChatCompletion", "ChatCompletionChunk", "ChatCompletionRequest", "ChatCompletions"],
    "duet.api.responses": ["Response", "ResponseStore", "Responses", "ResponsesRequest"],
    "duet.api.messages": ["AnthropicMessages", "ErrorBody", "Message", "MessagesRequest", "count_tokens"],
    "duet.api.observability": [
        "Observability", "ObservedRequests", "RequestObservation", "SharedMetrics", "WorkerSampler", "add_metrics_route",
        "configure_logging", "configure_tracing", "current_observation", "flush_traces",
    ],
    "duet.api.server": ["configure_process", "freeze_startup_objects", "main", "serve"],
}


def every_module() -> list[ModuleType]:
    """Every module of Duet's packages (and the root's own helpers), imported."""
    found: list[ModuleType] = []

    def walk(name: str) -> None:
        module = importlib.import_module(name)
        found.append(module)
        for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if info.name != "__main__":
                walk(f"{name}.{info.name}")

    for package in ("duet.agents", "duet.api", "duet.workbenches"):
        walk(package)
    found.append(duet)
    found += [importlib.import_module(f"duet.{info.name}") for info in pkgutil.iter_modules(duet.__path__)]
    return found


def named_in(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


@pytest.mark.parametrize("package", sorted(FACES))
def test_the_face_is_pinned(package: str) -> None:
    assert importlib.import_module(package).__all__ == FACES[package]


@pytest.mark.parametrize("package", sorted(FACES))
def test_every_name_of_a_face_is_importable_and_documented(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    undocumented = [name for name in module.__all__ if not named_in(name, module.__doc__ or "")]
    assert not undocumented, f"{package}'s docstring does not name {undocumented}"


def test_every_package_has_a_pinned_face() -> None:
    packages = {module.__name__ for module in every_module() if hasattr(module, "__path__")}
    assert packages == set(FACES)


def test_every_provider_a_team_file_may_name_loads() -> None:
    """Each component's provider (what its dumps carry: ``duet.agents.AnswerAgent``) imports as the class itself."""
    providers = {}
    for module in every_module():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            provider = cls.__dict__.get("component_provider_override")
            if isinstance(provider, str) and provider.startswith("duet."):
                providers[provider] = cls
    assert {"duet.agents.AnswerAgent", "duet.agents.ReasoningAgent", "duet.agents.GroundingAgent",
            "duet.agents.OpenAICompatibleClient", "duet.workbenches.DuetWorkbench", "duet.workbenches.ProxyTool",
            "duet.workbenches.PythonFunctionTool", "duet.workbenches.McpServerTool", "duet.workbenches.HttpServiceTool"} <= set(providers)
    for provider, cls in providers.items():
        package, _, name = provider.rpartition(".")
        assert getattr(importlib.import_module(package), name) is cls, provider
        assert name in importlib.import_module(package).__all__, provider


def test_every_duet_exception_is_a_duet_error_in_the_tree() -> None:
    tree = importlib.import_module("duet.agents._errors").__doc__ or ""
    exceptions = {cls for module in every_module() for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, BaseException) and cls.__module__ == module.__name__ and not cls.__name__.startswith("_")}
    errors = {cls for cls in exceptions if not issubclass(cls, (Warning, asyncio.CancelledError))}  # a cancellation is no error
    assert len(errors) >= 15
    assert [cls.__name__ for cls in errors if not issubclass(cls, DuetError)] == []
    assert [cls.__name__ for cls in exceptions if not named_in(cls.__name__, tree)] == []
