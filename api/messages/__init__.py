"""The Anthropic Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) over the duet.

Public API:

- :class:`AnthropicMessages` — the protocol on the shared request flow (:mod:`duet.api._serving`): its
  reader, its writers and its error shapes; :func:`count_tokens` — the token-count endpoint;
- :func:`read_input` — a request's conversation (AutoGen ``LLMMessage`` objects) and client tools;
- :class:`MessageStreamWriter`, :class:`MessageFold` — a run's parts as the event stream, or as one ``message``;
- :func:`estimate_input_tokens` — how ``count_tokens`` counts (four characters a token);
- :func:`error_body`, :func:`error_type` — Duet's errors in the Anthropic shape;
- the wire models: :class:`MessagesRequest`, :class:`Message`, :class:`ErrorBody` (:mod:`duet.api.messages._protocol`).
"""

from duet.api.messages._errors import error_body, error_type
from duet.api.messages._fold import MessageFold
from duet.api.messages._protocol import ErrorBody, Message, MessagesRequest
from duet.api.messages._reader import read_input
from duet.api.messages._service import AnthropicMessages, count_tokens
from duet.api.messages._stream import MessageStreamWriter
from duet.api.messages._tokens import estimate_input_tokens

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
