"""A `streamfold` server with the python tool on, in its own process, for the sandbox tests.

The model is scripted: a request's `model` is the code to run, base64url-encoded, and the
model's generations are "call python with that code", then a final answer. Run as
`python -m tests.agent.sandbox_server STORE`; prints the port once it listens.
"""

from __future__ import annotations

import base64
import socket
import sys
from collections.abc import Iterator, Mapping

import uvicorn

from streamfold.adapters.agent import AgentConfig, PythonLimits, PythonTool, ToolLimits
from streamfold.adapters.server import SQLiteEventStore, create_app

from .scripted import ScriptedAgentSource


class CodeScripts(Mapping[str, list[str]]):
    """A request's `model` is the code to run (base64url): call python with it, then answer."""

    def __getitem__(self, model: str) -> list[str]:
        code = base64.urlsafe_b64decode(model.encode()).decode()
        return [
            f"<|channel|>analysis to=python code<|message|>{code}<|call|>",
            "<|channel|>final<|message|>done<|return|>",
        ]

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def main() -> None:
    source = ScriptedAgentSource({})
    source.scripts = CodeScripts()  # type: ignore[assignment]
    config = AgentConfig(
        python=PythonTool(PythonLimits(seconds=20, scratch_bytes=32 << 20)),
        limits=ToolLimits(call_seconds=30),
    )
    app = create_app(source.engine(), store=SQLiteEventStore(sys.argv[1]), agent=config)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    sock = socket.create_server(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
