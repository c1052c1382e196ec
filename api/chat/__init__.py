"""OpenAI Chat Completions (``POST /v1/chat/completions``) on the shared request flow.

Public API:

- :class:`ChatCompletions` — the protocol (reader, writers, error shapes) the routes serve;
- the wire models: :class:`ChatCompletionRequest`, :class:`ChatCompletion`, :class:`ChatCompletionChunk`
  — the request, the collected answer and a streamed chunk (the stream itself is written by a byte
  encoder, held equal to the models by a test).
"""

from duet.api.chat._protocol import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from duet.api.chat._service import ChatCompletions

__all__ = ["ChatCompletion", "ChatCompletionChunk", "ChatCompletionRequest", "ChatCompletions"]
