"""The Anthropic Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) over the duet.

Public API:

- :class:`AnthropicMessages` — the protocol on the shared request flow (:mod:`duet.api.serving`): its
  reader, its writers and its error shapes; :func:`count_tokens` — the token-count endpoint;
- :func:`read_input` — a request's conversation (AutoGen ``LLMMessage`` objects) and client tools;
- :class:`MessageStreamWriter`, :class:`MessageFold` — a run's parts as the event stream, or as one ``message``;
- :func:`estimate_input_tokens` — how ``count_tokens`` counts (four characters a token);
- :func:`error_body`, :func:`error_type` — Duet's errors in the Anthropic shape;
- the wire models: :class:`MessagesRequest`, :class:`Message`, :class:`ErrorBody` (:mod:`duet.api.messages.protocol`).
"""

from .errors import error_body, error_type
from .fold import MessageFold
from .protocol import ErrorBody, Message, MessagesRequest
from .reader import read_input
from .service import AnthropicMessages, count_tokens
from .stream import MessageStreamWriter
from .tokens import estimate_input_tokens

__all__ = [
    "AnthropicMessages",
    "ErrorBody",
    "Message",
    "MessageFold",
    "MessageStreamWriter",
    "MessagesRequest",
    "count_tokens",
    "error_body",
    "error_type",
    "estimate_input_tokens",
    "read_input",
]
