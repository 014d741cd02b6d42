"""A tiny MCP server, built with the official `mcp` SDK: one tool, `forecast(city)`, over
streamable HTTP at http://127.0.0.1:PORT/mcp.

    .venv/bin/python examples/mcp_weather/server.py --port 8001
"""

from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer

# WARNING: the SDK otherwise logs every request at INFO.
server = MCPServer("weather", log_level="WARNING")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"Sunny in {city}, 21 C"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
