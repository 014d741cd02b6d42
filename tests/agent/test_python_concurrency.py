"""Issue 29: five concurrent python calls held 4 GB, so the calls that run at once are capped
(`PythonLimits.concurrent`; the rest wait for a slot, within their time limit). Held here over
a real socket: N + k requests sent at once through the official openai client, each model
calling python, the code in bubblewrap's sandbox.

The sandbox sees none of the test's files, so the code reports in over the network (the
operator's `--python-network`, `PythonTool(network=True)`): each call connects to a listener of
the test and blocks until the listener lets it go. The listener counts the calls connected at
once. It lets one go only when every unfinished call is accounted for, connected or waiting for
a slot (the tool's semaphore says how many wait): so without the cap all N + k connect before
any is let go, and with it N do, whatever the timing.
"""

from __future__ import annotations

import base64
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import attrs
from openai import OpenAI

from streamfold.adapters.agent import AgentConfig, PythonLimits, PythonTool
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.serving import serve

from .sandbox_server import CodeScripts
from .scripted import ScriptedAgentSource

CAP, MORE = 2, 3  # N slots, N + k concurrent requests


@attrs.define
class Gate:
    """The listener the sandboxed calls connect to: it holds each connection, counts how many
    are held at once, and releases one when every unfinished call is held or waiting."""

    tool: PythonTool
    calls: int
    sock: socket.socket = attrs.field(factory=lambda: socket.create_server(("127.0.0.1", 0)))
    held: list[socket.socket] = attrs.Factory(list)
    peak: int = 0
    released: int = 0

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        self.sock.settimeout(0.01)  # a poll of the counts, not a limit on anything
        while self.released < self.calls:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                conn = None
            if conn is not None:
                conn.settimeout(30)
                assert conn.recv(6) == b"start\n"
                self.held.append(conn)
                self.peak = max(self.peak, len(self.held))
            waiting = self.tool._slots.statistics().tasks_waiting
            if self.held and len(self.held) + waiting == self.calls - self.released:
                first = self.held.pop(0)
                first.sendall(b"go")
                first.close()
                self.released += 1
        self.sock.close()


def test_python_calls_beyond_the_cap_wait_for_a_slot_over_a_real_socket() -> None:
    tool = PythonTool(PythonLimits(concurrent=CAP, seconds=30), network=True)
    calls = CAP + MORE
    gate = Gate(tool, calls)
    code = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {gate.port}))\n"
        "s.sendall(b'start\\n')\n"
        "print('let go' if s.recv(2) == b'go' else 'cut off')\n"
    )
    source = ScriptedAgentSource({})
    source.scripts = CodeScripts()  # type: ignore[assignment]
    app = create_app(source.engine(), store=MemoryEventStore(), agent=AgentConfig(python=tool))
    listener = threading.Thread(target=gate.serve, daemon=True)
    listener.start()
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)

        def run(_: int) -> tuple[str, str]:
            response = client.responses.create(
                model=base64.urlsafe_b64encode(code.encode()).decode(),
                input="go",
                tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
            )
            call = response.output[0]
            assert call.type == "code_interpreter_call", response.output
            logs = "".join(o.logs for o in call.outputs or () if o.type == "logs")
            return response.status, logs

        with ThreadPoolExecutor(calls) as pool:
            results = list(pool.map(run, range(calls)))
    listener.join(timeout=30)
    # Every request ran its call to the end (those past the cap waited, none was refused) ...
    assert results == [("completed", "let go\n")] * calls
    assert gate.released == calls
    # ... and never more than the cap at once, the cap reached.
    assert gate.peak == CAP
