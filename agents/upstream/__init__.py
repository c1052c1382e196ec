"""The upstream model client: Duet's lean AutoGen ``ChatCompletionClient`` for OpenAI-compatible
servers, and how a model's thinking is told from its answer as the text streams in.

Public API:

- :class:`OpenAICompatibleClient` — streams ``/chat/completions`` over aiohttp; its stream yields
  reasoning as :class:`ReasoningText` pieces and the answer as plain ``str``, then an
  :class:`UpstreamResult`; configured by :class:`OpenAICompatibleClientConfig` (the fields a YAML
  model section shares: :class:`ModelClientOptions`); :data:`ANSWER_MODEL_INFO` is the default
  ``model_info``;
- :func:`streaming_create_args` — what a streamed call to any AutoGen client needs besides its
  options (the usage chunk); :func:`add_usage` — two usages summed;
- :data:`STREAMED_TEXT_UNKEPT_ARG` — the call argument of a caller that keeps the streamed text itself
  (the result then carries none of it);
- :data:`CACHE_MARKS_ARG` — the call argument that hands the client a request's cache marks (sent
  where its upstream documents them: :mod:`~duet.agents.upstream._cache_hints`);
  :func:`derived_cache_key` — a ``prompt_cache_key`` for a stage's calls (the reasoner's);
- :class:`ReasoningSplitter` — a stream's pieces as (reasoning, content) pairs (``<think>`` tags
  or :class:`ReasoningText`); :func:`strip_think_blocks`, :func:`think_text` — ``<think>`` blocks
  in text a client sends back.

Inside (private modules, as autogen-ext splits its own clients): ``_options`` (config, defaults),
``_transform`` (AutoGen messages and tools → the request body), ``_sse`` (server-sent events),
``_accumulator`` (a stream's chunks → pieces and the result; pure), ``_cache_hints`` (which
upstreams take prompt-cache hints, and the marks on the wire), ``_result``, ``_transport``
(connection pools, aiohttp tricks), ``_errors`` (what an upstream's failures stand for), ``_client``.
"""

from duet.agents.upstream._cache_hints import CACHE_MARKS_ARG, derived_cache_key
from duet.agents.upstream._client import STREAMED_TEXT_UNKEPT_ARG, OpenAICompatibleClient
from duet.agents.upstream._options import ANSWER_MODEL_INFO, ModelClientOptions, OpenAICompatibleClientConfig
from duet.agents.upstream._result import UpstreamResult, add_usage
from duet.agents.upstream._transform import streaming_create_args
from duet.agents._thinking import ReasoningSplitter, ReasoningText, strip_think_blocks, think_text

__all__ = [
    "ANSWER_MODEL_INFO",
    "CACHE_MARKS_ARG",
    "ModelClientOptions",
    "OpenAICompatibleClient",
    "OpenAICompatibleClientConfig",
    "ReasoningSplitter",
    "ReasoningText",
    "STREAMED_TEXT_UNKEPT_ARG",
    "UpstreamResult",
    "add_usage",
    "derived_cache_key",
    "streaming_create_args",
    "strip_think_blocks",
    "think_text",
]
