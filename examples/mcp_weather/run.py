"""An MCP server and a recorded conversation that calls it, served by `streamfold serve`: no
weights, no network, everything on 127.0.0.1.

    .venv/bin/python examples/mcp_weather/run.py

It starts the two commands a user would run, on free ports,

    python examples/mcp_weather/server.py --port MCP_PORT
    streamfold serve --traces examples/mcp_weather/conversations --mcp-allow \
        http://127.0.0.1:MCP_PORT/ --port PORT --store :memory: --api-key KEY

and asks the model `mcp-weather` (the replayed conversation directory: turn 0 calls the
server's `forecast` tool, turn 1 answers from its output) twice with the official openai
client: once with `require_approval: "never"` (the server's own loop runs both turns in one
response), once with `"always"` (the response asks; the follow-up approves, and the same
conversation directory answers it).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from openai import OpenAI

HERE = Path(__file__).parent
QUESTION = "What's the weather in Paris tomorrow?"
ANSWER = "Tomorrow in Paris: sunny, 21 C."
KEY = "example-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(command: list[str], port: int) -> Iterator[None]:
    """`command` as a subprocess, once it accepts connections on `port`."""
    process = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[1]} did not start")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(timeout=15)


def main() -> None:
    mcp_port, port = free_port(), free_port()
    mcp_url = f"http://127.0.0.1:{mcp_port}"
    serve = [sys.executable, "-m", "streamfold", "serve", "--traces", str(HERE / "conversations")]
    serve += ["--mcp-allow", f"{mcp_url}/", "--port", str(port), "--store", ":memory:"]
    serve += ["--api-key", KEY, "--log-level", "warning"]
    with (
        running([sys.executable, str(HERE / "server.py"), "--port", str(mcp_port)], mcp_port),
        running(serve, port),
    ):
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
        tool = {"type": "mcp", "server_label": "weather", "server_url": f"{mcp_url}/mcp"}

        # 1. The server runs the tool itself: one response, both turns.
        response = client.responses.create(
            model="mcp-weather", input=QUESTION, tools=[{**tool, "require_approval": "never"}]
        )
        print([item.type for item in response.output])
        print(response.output_text)

        # 2. With approval: the response asks, the follow-up approves and the call runs.
        asking = {**tool, "require_approval": "always"}
        asked = client.responses.create(model="mcp-weather", input=QUESTION, tools=[asking])
        request = asked.output[-1]
        print([item.type for item in asked.output], request.name, request.arguments)
        approved = client.responses.create(
            model="mcp-weather",
            previous_response_id=asked.id,
            input=[
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": request.id,
                    "approve": True,
                }
            ],
            tools=[asking],
        )
        print([item.type for item in approved.output])
        print(approved.output_text)
        if {response.output_text, approved.output_text} != {ANSWER}:
            raise SystemExit(f"expected the answer {ANSWER!r}")


if __name__ == "__main__":
    main()
