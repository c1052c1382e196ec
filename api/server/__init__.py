"""The process that serves Duet: the ``duet`` command line (:func:`main`: ``serve``, ``check``,
``export-team``), the HTTP server with the edge's limits and a graceful shutdown (:func:`serve`),
several workers on one port, the startup summary and checks, and the process-wide settings
``duet serve`` makes (:func:`configure_process`, :func:`freeze_startup_objects`)."""

from duet.api.server._cli import main
from duet.api.server._process import configure_process, freeze_startup_objects
from duet.api.server._server import serve

__all__ = ["configure_process", "freeze_startup_objects", "main", "serve"]
