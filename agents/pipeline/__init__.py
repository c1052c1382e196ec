"""The run pipeline: :class:`Duet` (a pipeline ready to run), its run as the caller reads it
(:class:`DuetStream`, collected: :class:`DuetResult`), the pool of idle teams, the team itself
(:func:`build_team`, :func:`export_team`, made by :class:`TeamFactory`) and team files
(:func:`load_team`, :func:`load_team_config`, :func:`diagnose`)."""

from duet.agents.pipeline._duet import Duet
from duet.agents.pipeline._legacy_providers import OldTeamFileWarning
from duet.agents.pipeline._result import DuetResult
from duet.agents.pipeline._stream import MAX_BUFFERED_EVENTS, DuetStream
from duet.agents.pipeline._team import build_team, duet_termination, export_team, reset_team
from duet.agents.pipeline._team_factory import TeamFactory
from duet.agents.pipeline._team_files import diagnose, load_team, load_team_config

__all__ = [
    "Duet",
    "DuetResult",
    "DuetStream",
    "MAX_BUFFERED_EVENTS",
    "OldTeamFileWarning",
    "TeamFactory",
    "build_team",
    "diagnose",
    "duet_termination",
    "export_team",
    "load_team",
    "load_team_config",
    "reset_team",
]
