"""How many client connections the open-file limit leaves room for: each running completion holds an
upstream connection beside its client's."""

from __future__ import annotations

from duet.api._settings import ServiceOptions
from duet.api.server._server import FILES_BESIDES_CONNECTIONS, connections_that_fit


def test_the_defaults_fit_a_container_limit() -> None:
    """A container's usual limit (1,048,576) holds the default caps whole."""
    options = ServiceOptions()
    assert connections_that_fit(options, 1 << 20) > options.max_connections


def test_each_running_completion_keeps_a_file_for_its_upstream() -> None:
    options = ServiceOptions(max_concurrent_requests=1000, max_connections=4000)
    assert connections_that_fit(options, 4000) == 4000 - FILES_BESIDES_CONNECTIONS - 1000


def test_a_small_limit_is_shared_between_clients_and_upstreams() -> None:
    """At 1,024 files (a shell's default) the cap on completions cannot have its upstreams whole: half of
    what is left goes to client connections, half to the upstream connections of running completions."""
    options = ServiceOptions(max_concurrent_requests=1024)
    usable = 1024 - FILES_BESIDES_CONNECTIONS
    assert connections_that_fit(options, 1024) == usable - usable // 2


def test_a_tiny_limit_still_leaves_one_connection() -> None:
    assert connections_that_fit(ServiceOptions(), 3) >= 1
