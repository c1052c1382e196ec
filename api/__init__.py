"""The HTTP edge: an OpenAI-compatible API over the duet.

Public API:

- :func:`create_app` — the FastAPI app (reads ``DUET_*`` settings unless given a :class:`ServiceConfig`);
- :class:`ServiceConfig` — what to serve: pipelines, API keys, ping interval;
- :class:`EnvSettings`, :class:`ConfigFile` — the environment variables and the YAML file;
  :class:`TeamPipelineSettings` — a pipeline served from a team file; :class:`ConfigError` — a
  configuration the operator must fix (one line naming where it is set);
- :func:`main` — the ``duet`` command line;
- :func:`configure_process`, :func:`freeze_startup_objects` — the process settings ``duet serve``
  makes (for a program that serves :func:`create_app` itself).
"""

from duet.api._app import ServiceConfig, create_app
from duet.api.server import configure_process, freeze_startup_objects, main
from duet.api._settings import ConfigError, ConfigFile, EnvSettings, TeamPipelineSettings

__all__ = [
    "ConfigError",
    "ConfigFile",
    "EnvSettings",
    "ServiceConfig",
    "TeamPipelineSettings",
    "configure_process",
    "create_app",
    "freeze_startup_objects",
    "main",
]
