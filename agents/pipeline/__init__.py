"""The run pipeline.

Public API:

- :class:`Duet` — a pipeline ready to run; its run as the caller reads it, :class:`DuetStream`
  (at most :data:`MAX_BUFFERED_EVENTS` events wait unread: then the agents wait for the reader),
  collected: :class:`DuetResult`;
- the team: :func:`build_team` (the agents as a ``RoundRobinGroupChat``), :func:`export_team` (a
  pipeline as a team component), made for each run's pool by :class:`TeamFactory` (shared model
  clients, the lean runtime);
- team files: :func:`load_team_config` (read, Duet 0.1.0's provider names mapped, with an
  :class:`OldTeamFileWarning`), :func:`load_team` (loaded; an error names the provider that broke).
"""

from duet.agents.pipeline._duet import Duet
from duet.agents.pipeline._legacy_providers import OldTeamFileWarning
from duet.agents.pipeline._result import DuetResult
from duet.agents.pipeline._stream import MAX_BUFFERED_EVENTS, DuetStream
from duet.agents.pipeline._team import build_team, export_team
from duet.agents.pipeline._team_factory import TeamFactory
from duet.agents.pipeline._team_files import load_team, load_team_config

__all__ = [
    "Duet",
    "DuetResult",
    "DuetStream",
    "MAX_BUFFERED_EVENTS",
    "OldTeamFileWarning",
    "TeamFactory",
    "build_team",
    "export_team",
    "load_team",
    "load_team_config",
]
