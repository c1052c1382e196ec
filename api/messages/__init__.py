"""The Anthropic Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) over the duet.

Public API:

- :class:`AnthropicMessages` — the protocol on the shared request flow (:mod:`duet.api._serving`): its
  reader, its writers and its error shapes; :func:`count_tokens` — the token-count endpoint (four
  characters a token; no model is called);
- the wire models: :class:`MessagesRequest`, :class:`Message` (the collected answer), :class:`ErrorBody`.
"""

from duet.api.messages._protocol import ErrorBody, Message, MessagesRequest
from duet.api.messages._service import AnthropicMessages, count_tokens

__all__ = ["AnthropicMessages", "ErrorBody", "Message", "MessagesRequest", "count_tokens"]
