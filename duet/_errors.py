"""The base of every exception Duet raises on purpose, shared by every room (the workbenches raise
Duet errors too, and cannot import the agents). The tree is in :mod:`duet.agents._errors`."""


class DuetError(Exception):
    """Base class of every error Duet raises on purpose; the tree is in :mod:`duet.agents._errors`."""
