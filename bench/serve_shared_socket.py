"""``duet`` as before each worker had a socket of its own: its workers share the parent's one
listening socket (what ``duet serve --workers N`` does where ``SO_REUSEPORT`` does not balance).
The "before" of ``bench/workers_share.py``; a benchmark's launcher, not a way to serve.

    .venv/bin/python bench/serve_shared_socket.py serve
"""

from __future__ import annotations

import duet.api.server._workers as workers
from duet.api.server._cli import main

if __name__ == "__main__":
    workers.REUSE_PORT = False  # the parent listens, and every worker accepts from its socket
    main()
