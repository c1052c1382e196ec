"""OpenAI Chat Completions (``POST /v1/chat/completions``) on the shared request flow.

Public API:

- :class:`ChatCompletions` — the protocol (reader, writers, error shapes) the routes serve;
- :class:`ChatCompletionRequest`, :class:`ChatCompletion`, :class:`ChatCompletionChunk` — the request,
  the collected answer and a streamed chunk (wire models; the stream itself is written by a byte
  encoder, :class:`ChunkEncoder`, held equal to the models by a test).
"""

from duet.api.chat._protocol import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from duet.api.chat._service import ChatCompletions
from duet.api.chat._stream import ChunkEncoder

__all__ = ["ChatCompletion", "ChatCompletionChunk", "ChatCompletionRequest", "ChatCompletions", "ChunkEncoder"]
