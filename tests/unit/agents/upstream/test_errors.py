"""What an upstream's failure stands for, in the shapes real model servers send (issue 25)."""

from __future__ import annotations


import pytest

from duet.agents._errors import UpstreamModelNotFound, UpstreamStatusError
from duet.agents.upstream._errors import status_error, unlisted_model


def test_error_bodies_in_any_shape_give_their_message() -> None:
    gemini = b'[{"error": {"code": 429, "message": "Resource has been exhausted.", "status": "RESOURCE_EXHAUSTED"}}]'
    assert str(status_error(gemini, 429, "application/json", None, "g")) == "model g answered HTTP 429: Resource has been exhausted."
    assert str(status_error(b"upstream connect error", 503, "text/plain", None, "g")).endswith("HTTP 503: upstream connect error")


@pytest.mark.parametrize("status, body", [
    (404, b'{"error": {"message": "model \'qwen3:8b\' not found"}}'),  # Ollama
    (400, b'{"object": "error", "message": "Invalid model: x", "type": "invalid_model", "code": "1500"}'),  # Mistral
    (400, b'{"error": {"code": "1211", "message": "\\u6a21\\u578b\\u4e0d\\u5b58\\u5728"}}'),  # Zhipu
    (400, b'{"error": {"code": 400, "message": "x is not a valid model ID"}}'),  # OpenRouter
])
def test_a_model_the_upstream_does_not_serve(status: int, body: bytes) -> None:
    assert isinstance(status_error(body, status, "application/json", None, "m"), UpstreamModelNotFound)


def test_context_too_long_is_not_a_missing_model() -> None:
    body = b'{"error": {"message": "This model\'s maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}'
    assert type(status_error(body, 400, "application/json", None, "m")) is UpstreamStatusError


def test_the_models_list() -> None:
    assert unlisted_model(b'{"data": [{"id": "models/gemini-2.5-flash"}]}', "gemini-2.5-flash") is None
    assert unlisted_model(b"not a list", "m") is None
    missing = unlisted_model(b'{"data": [{"id": "llama3"}]}', "qwen3:8b")
    assert isinstance(missing, UpstreamModelNotFound) and "qwen3:8b" in str(missing)
