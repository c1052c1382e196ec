"""The names of Duet's team and its members: what the driver hands the task to, whom the agents
hand client tool calls to, and which stage an error names."""


CLIENT = "client"
"""The pseudo-agent that stands for the HTTP client: conversations come from it, client tool calls go to it."""


GROUNDER_NAME = "grounder"
"""The grounding agent's name in Duet's team (it goes first, when the pipeline has grounding)."""


REASONER_NAME = "reasoner"
"""The reasoning agent's name in Duet's team (an error names the failed stage after it)."""


ANSWERER_NAME = "answerer"
"""The answer agent's name in Duet's team; the team ends when it has spoken."""


TEAM_NAME = "duet"
"""The name of Duet's team (:func:`~duet.agents.build_team`); the task is handed to the whole team."""
