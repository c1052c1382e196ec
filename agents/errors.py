"""Errors the duet raises. The HTTP layer maps each type to a status code (see ``api/errors.py``)."""

from __future__ import annotations


class DuetError(Exception):
    """Base class of every error Duet raises on purpose."""


class UpstreamError(DuetError):
    """An upstream model server failed; ``message`` says which one and what it answered."""

    def __init__(self, message: str, *, upstream_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.upstream_status = upstream_status


class UpstreamStatusError(UpstreamError):
    """The upstream answered with a non-200 status, or put an error object into its stream."""


class UpstreamConnectionError(UpstreamError):
    """The upstream could not be reached, or closed the connection before the model finished."""


class UpstreamProtocolError(UpstreamError):
    """The upstream's answer is not what the OpenAI protocol says (e.g. a chunk that is not JSON)."""


class UpstreamTimeout(UpstreamError):
    """The upstream stayed silent for longer than the client's read timeout."""


class TeamLoadError(DuetError):
    """A team file could not be loaded; the message names the provider that failed."""
