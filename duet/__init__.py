"""Duet: an OpenAI-compatible endpoint where a reasoning agent and an answer agent work as a pair.

- :mod:`duet.agents` — the pipeline: ``Duet``, the two agents, their settings, events and model client;
- :mod:`duet.workbenches` — the shared workbench, client (proxy) tools and service tools (``service_tool``);
- :mod:`duet.api` — the HTTP edge (``create_app``) and the ``duet`` command line.

This folder holds this file and the few helpers every room shares (private: ``duet._errors``, the
base of every Duet error, is :class:`duet.agents.DuetError`): the three packages live in the
repository's top-level folders ``agents/``, ``workbenches/`` and ``api/`` (mapped by ``package-dir``
in pyproject.toml). The root exports no names of its own.
"""

import sys as _sys

__all__: list[str] = []


def _import_jsonref_without_requests() -> None:
    """autogen-core imports ``jsonref`` to inline the local ``$ref``s of a tool's schema, and jsonref
    imports ``requests`` (with urllib3, charset-normalizer, idna: ~4.5 MB resident) for the one thing
    it would use it for, fetching a remote ``$ref`` over HTTP, which falls back to urllib without it.
    No schema AutoGen resolves has a remote ``$ref``, so jsonref is loaded here, before anything
    imports autogen-core, with ``requests`` hidden for the moment of its import; ``import requests``
    works as usual afterwards. If ``requests`` or ``jsonref`` is loaded already, nothing is done."""
    if "jsonref" in _sys.modules or "requests" in _sys.modules:
        return
    _sys.modules["requests"] = None  # type: ignore[assignment]  # "import requests" raises ImportError
    try:
        import jsonref  # noqa: F401
    finally:
        del _sys.modules["requests"]


_import_jsonref_without_requests()
