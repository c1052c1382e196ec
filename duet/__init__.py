"""Duet: an OpenAI-compatible endpoint where a reasoning agent and an answer agent work as a pair.

- :mod:`duet.agents` — the pipeline: ``Duet``, the two agents, their settings, events and model client;
- :mod:`duet.workbenches` — the shared workbench, client (proxy) tools and service tools (``service_tool``);
- :mod:`duet.api` — the HTTP edge (``create_app``) and the ``duet`` command line.

This folder holds only this file: the three packages live in the repository's top-level folders
``agents/``, ``workbenches/`` and ``api/`` (mapped by ``package-dir`` in pyproject.toml).
"""
