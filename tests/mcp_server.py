"""A real MCP server for the tests, written with the ``mcp`` package.

    python -m tests.mcp_server                 # stdio
    python -m tests.mcp_server --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp

Writes its PID to ``$MCP_PID_FILE`` when set, so a test can kill it (by PID) and watch Duet restart it.
"""

from __future__ import annotations

import argparse
import os

from mcp.server.fastmcp import FastMCP


def build(port: int = 8000) -> FastMCP:
    server = FastMCP("duet-test-tools", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @server.tool()
    def shout(text: str) -> str:
        """Returns the text in capitals, with the server's process id."""
        return f"{text.upper()} (pid {os.getpid()})"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port instead of stdio")
    args = parser.parse_args()
    if os.environ.get("MCP_PID_FILE"):
        with open(os.environ["MCP_PID_FILE"], "w") as pid_file:
            pid_file.write(str(os.getpid()))
    if args.http:
        build(args.http).run("streamable-http")
    else:
        build().run("stdio")


if __name__ == "__main__":
    main()
