"""Errors the duet raises, and the tree of every Duet exception. The HTTP layer maps each type to a
status code once (:func:`duet.api._errors.as_api_error`).

Every exception Duet raises on purpose is a :class:`DuetError` (one ``except DuetError`` catches
them all); where a class was a ``ValueError`` or a ``RuntimeError`` before the tree existed it still
is one too (an ``except`` written for that keeps working)::

    DuetError                                   duet.agents (defined in duet._errors: every room raises one)
    ├── UpstreamError                           an upstream model server failed (HTTP: 400, 429, 502-504)
    │   ├── UpstreamStatusError                 it answered an error status, or an error object
    │   │   └── UpstreamModelNotFound           it does not serve the configured model (HTTP 502)
    │   ├── UpstreamConnectionError             it broke the connection off
    │   │   └── UpstreamUnreachable             no connection could be made
    │   ├── UpstreamProtocolError               its answer is not the OpenAI protocol
    │   └── UpstreamTimeout                     it stayed silent past the read timeout
    ├── ConversationError (ValueError)          a message the duet cannot use (HTTP 400 naming it)
    ├── TeamLoadError                           a team file that does not load, naming the provider
    ├── RunNotBoundError                        a Duet task handed to an agent outside a run
    ├── StoreOpenError (RuntimeError)           the state store cannot open: the service does not start
    ├── StoreUnavailable (RuntimeError)         a store call failed: the round goes on without it
    │                                           (duet.agents.continuations)
    ├── ClientSideToolError (RuntimeError)      a proxy tool was run in-process (duet.workbenches)
    ├── McpServerUnavailable (RuntimeError)     an MCP server is down, being restarted (duet.workbenches)
    ├── ConfigError (ValueError)                a configuration the operator must fix (duet.api)
    └── APIError                                an error as a client gets it over HTTP: a status and the
                                                protocol's error body (duet.api); every error above
                                                that reaches a client is mapped to one

Inside the model client (:mod:`duet.agents.upstream`, never raised out of it): ``EventTooLarge``, a
DuetError that becomes an ``UpstreamProtocolError``; ``ReadCancelled``, a cancellation (an
``asyncio.CancelledError``, not an error) raised into a read its request's cancellation stopped.

Warnings: ``OldTeamFileWarning`` (a ``FutureWarning``, :mod:`duet.agents.pipeline`): a team file names
Duet's components by their old top-level names (``agents.AnswerAgent``, as Duet 0.1.0 exported them);
it loads, and says so.

An upstream failure names the stage and the model (``answer model qwen2.5:7b answered HTTP 429:
…``), never the upstream's URL, and keeps what the upstream said about it (status, ``code``,
``type``, ``param``, ``Retry-After``). Configured secrets never appear in a message: every
upstream error is masked (:func:`mask_secrets`) when it is made.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Iterable, Mapping

from duet._errors import DuetError
from duet.agents._names import ANSWERER_NAME, REASONER_NAME

MIN_SECRET_LENGTH = 6
"""Shorter values are not masked (masking "1" or "abc" everywhere would garble every message)."""

_secrets: set[str] = set()
_ordered_secrets: tuple[str, ...] = ()


def register_secrets(values: Iterable[str | None]) -> None:
    """Adds configured secrets (API keys, header values) to what :func:`mask_secrets` hides."""
    global _ordered_secrets
    added = {value for value in values if value and len(value) >= MIN_SECRET_LENGTH} - _secrets
    if added:
        _secrets.update(added)
        _ordered_secrets = tuple(sorted(_secrets, key=len, reverse=True))  # a longer secret may contain a shorter one


def mask_secrets(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    for secret in _ordered_secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class UpstreamError(DuetError):
    """An upstream model server failed.

    ``message`` reads "<stage> <model> <what happened>": the model client knows the model, the
    agent that called it names the stage (:meth:`at_stage`). The upstream's own ``code``,
    ``error_type``, ``param`` and ``retry_after`` (the ``Retry-After`` header, as sent) are kept, and
    the ``base_url`` it was sent to.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        upstream_status: int | None = None,
        code: str | None = None,
        error_type: str | None = None,
        param: str | None = None,
        retry_after: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self.detail = mask_secrets(message)
        self.model = model
        self.base_url = base_url
        """The server the call was sent to, when the model client knows it (Duet's does)."""
        self.stage = "model"
        self.upstream_status = upstream_status
        self.code = code
        self.error_type = error_type
        self.param = param
        self.retry_after = retry_after
        self.retries = 0
        """How often Duet's model client already tried the call again before giving up (its retry policy)."""
        super().__init__(self.detail)

    @property
    def message(self) -> str:
        return f"{self.stage} {self.model} {self.detail}" if self.model else f"the upstream {self.stage} {self.detail}"

    def __str__(self) -> str:
        return self.message

    def at_stage(self, agent_name: str) -> "UpstreamError":
        """Names the stage after the agent whose model failed ("reasoning model", "answer model")."""
        self.stage = {REASONER_NAME: "reasoning model", ANSWERER_NAME: "answer model"}.get(agent_name, f"{agent_name}'s model")
        return self


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status, or sent an error object instead of an answer."""


class UpstreamModelNotFound(UpstreamStatusError):
    """The upstream does not serve the model Duet is configured with (Ollama's 404 for a model not
    pulled, Mistral's ``invalid_model``, Zhipu's code 1211, ...): the operator's configuration to fix,
    not the client's request."""


class UpstreamConnectionError(UpstreamError):
    """The upstream closed the connection before the model finished."""


class UpstreamUnreachable(UpstreamConnectionError):
    """No connection to the upstream could be made (refused, unknown host, connect timeout)."""


class UpstreamProtocolError(UpstreamError):
    """The upstream's answer is not what the OpenAI protocol says (an HTML page, a chunk that is
    not JSON, a stream without any answer)."""


class UpstreamTimeout(UpstreamError):
    """The upstream stayed silent for longer than the client's read timeout."""


class TeamLoadError(DuetError):
    """A team file could not be loaded; the message names the provider that failed."""


def upstream_error_text(body: bytes | str | Any, status: int) -> str:
    """The upstream's own error message, whatever shape it came in (bounded)."""
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        text = text.strip()
        try:
            body = json.loads(text)
        except ValueError:
            return _shorten(text) or f"HTTP {status}"
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return _shorten(str(error.get("message") or error.get("detail") or error))
    return _shorten(str(error)) or f"HTTP {status}"


def error_fields(error: Any, status: int | None = None) -> dict[str, Any]:
    """``code``, ``error_type`` and ``param`` of an OpenAI-style error object, as strings. A code
    that only repeats the HTTP ``status`` says nothing more and is left out."""
    if not isinstance(error, dict):
        return {}
    fields = {"code": error.get("code"), "error_type": error.get("type"), "param": error.get("param")}
    kept = {name: str(value) for name, value in fields.items() if isinstance(value, (str, int)) and not isinstance(value, bool)}
    if status is not None and kept.get("code") == str(status):
        del kept["code"]
    return kept


MODEL_NOT_FOUND_CODES = frozenset(("model_not_found", "invalid_model", "1211", "resource_not_found_error", "NotFoundError"))
"""The ``code`` or ``type`` with which servers say they do not serve a model: OpenAI, Groq
(``model_not_found``), Mistral (``invalid_model``), Zhipu (1211), Moonshot (``resource_not_found_error``),
vLLM (``NotFoundError``)."""
_MODEL_NOT_FOUND = re.compile(
    r"not a valid model|invalid model|no such model|model (does )?not exist|model.{0,200}?(not (be )?found|does not exist)", re.I | re.S)


def model_not_found(status: int, fields: Mapping[str, str], text: str) -> bool:
    """The upstream says it does not serve the model (a 404 of ``/chat/completions`` is about the model
    or the URL: both are Duet's configuration).

    >>> model_not_found(404, {}, "model 'qwen3:8b' not found"), model_not_found(400, {"code": "invalid_model"}, "Invalid model: x")
    (True, True)
    >>> model_not_found(400, {"code": "context_length_exceeded"}, "This model's maximum context length is 8192 tokens.")
    False
    """
    if status == 404:
        return True
    if status != 400:
        return False
    if fields.get("code") in MODEL_NOT_FOUND_CODES or fields.get("error_type") in MODEL_NOT_FOUND_CODES:
        return True
    return bool(_MODEL_NOT_FOUND.search(text))


def _shorten(text: str, limit: int = 1000) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def is_openai_error(exc: BaseException) -> bool:
    """True for an ``openai`` SDK error. The SDK is imported only by a pipeline that uses AutoGen's
    stock client; before that, no exception can be one of its errors (and nothing imports it here)."""
    openai = sys.modules.get("openai")
    return openai is not None and isinstance(exc, openai.APIError)


def upstream_error_from_openai(exc: BaseException, model: str | None) -> UpstreamError | None:
    """An ``openai`` SDK error (AutoGen's stock ``OpenAIChatCompletionClient``) as the same
    :class:`UpstreamError` Duet's own client raises; ``None`` for anything else."""
    if not is_openai_error(exc):
        return None
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return UpstreamTimeout("did not answer in time", model=model)
    if isinstance(exc, openai.APIConnectionError):
        if type(exc.__cause__).__name__ in ("ConnectError", "ConnectTimeout"):
            return UpstreamUnreachable("cannot be reached", model=model)
        return UpstreamConnectionError("broke off the connection", model=model)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        fields = error_fields(exc.body, status)
        text = upstream_error_text(exc.body, status) if exc.body is not None else exc.message
        kind = UpstreamModelNotFound if model_not_found(status, fields, text) else UpstreamStatusError
        return kind(
            f"answered HTTP {status}: {text}",
            model=model,
            upstream_status=status,
            retry_after=exc.response.headers.get("retry-after"),
            **fields,
        )
    if isinstance(exc, openai.APIError):  # e.g. an error object inside a stream
        return UpstreamStatusError(f"failed: {upstream_error_text(exc.body, 200) if exc.body else exc.message}", model=model,
                                   **error_fields(exc.body))
    return None
