"""The python tool's sandbox, attacked as issue 29 found it: model-written code, run through a
real `streamfold` server (its own process, a real socket, the official openai client), tries to
reach that server. Each test names what it pins; each failed against the unsandboxed tool."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from openai import OpenAI

REPO = Path(__file__).resolve().parents[2]
SECRET = "planted-" + uuid.uuid4().hex


@attrs.frozen
class Server:
    process: subprocess.Popen[str]
    client: OpenAI
    port: int
    store: Path

    def run(self, code: str) -> str:
        model = base64.urlsafe_b64encode(code.encode()).decode()
        response = self.client.responses.create(
            model=model,
            input="go",
            tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
        )
        call = response.output[0]
        assert call.type == "code_interpreter_call", response.output
        assert response.status == "completed", response
        return "".join(o.logs for o in call.outputs or () if o.type == "logs")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("sandbox") / "responses.sqlite3"
    env = dict(os.environ, SECRET_TOKEN=SECRET)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.agent.sandbox_server", str(store)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
    try:
        yield Server(process=process, client=client, port=port, store=store)
    finally:
        process.kill()
        process.wait()


def test_the_servers_environment_is_not_readable(server: Server) -> None:
    """Issue 29: the code read /proc/<server pid>/environ and got SECRET_TOKEN."""
    logs = server.run(
        "import os, glob\n"
        "print(dict(os.environ))\n"
        "for path in [f'/proc/{os.getppid()}/environ', *glob.glob('/proc/*/environ')]:\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print(path, exc)\n"
    )
    assert SECRET not in logs and "SECRET_TOKEN" not in logs
    assert "/environ" in logs  # the code ran


def test_the_code_cannot_kill_or_stop_the_server(server: Server) -> None:
    """Issue 29: os.kill(os.getppid(), SIGKILL) killed the server; SIGSTOP froze it."""
    logs = server.run(
        "import os, signal\n"
        "for pid in {os.getppid(), 1}:\n"
        "    for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
        "        try:\n"
        "            os.kill(pid, sig)\n"
        "        except OSError as exc:\n"
        "            print(exc)\n"
        "print('alive')\n"
    )
    assert "alive" in logs
    assert server.process.poll() is None
    assert "42" in server.run("print(6 * 7)")  # and it still answers


def test_no_store_source_tree_system_file_or_network(server: Server) -> None:
    """Issue 29: the code read every SQLite store, /etc/passwd and the source tree, and made
    HTTP requests to local services."""
    assert server.store.exists()
    paths = [server.store, REPO / "adapters" / "agent" / "_python.py", "/etc/passwd", REPO]
    logs = server.run(
        "import os, socket\n"
        f"for path in {[str(p) for p in paths]!r}:\n"
        "    try:\n"
        "        print(path, 'READ', len(os.listdir(path) if os.path.isdir(path) "
        "else open(path, 'rb').read()))\n"
        "    except OSError as exc:\n"
        "        print(path, 'refused', type(exc).__name__)\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {server.port}), timeout=2)\n"
        "    print('network READ')\n"
        "except OSError as exc:\n"
        "    print('network refused', type(exc).__name__)\n"
    )
    assert "READ" not in logs, logs
    assert logs.count("refused") == len(paths) + 1


def test_files_outside_scratch_do_not_persist_and_scratch_is_capped(server: Server) -> None:
    """Issue 29: five 15 MiB files written outside the scratch directory stayed (RLIMIT_FSIZE
    is per file)."""
    outside = Path("/tmp") / f"streamfold-escape-{uuid.uuid4().hex}"
    logs = server.run(
        "written = 0\n"
        f"for path in [{str(outside)!r}] + [f'big{{i}}' for i in range(5)]:\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(b'x' * (15 << 20))\n"
        "        written += 15\n"
        "    except OSError as exc:\n"
        "        print(path, exc)\n"
        "print('written MiB', written)\n"
    )
    assert not outside.exists()
    # The scratch is a 32 MiB tmpfs in this server: two 15 MiB files fit, the third does not.
    assert "written MiB 30" in logs, logs


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_new_session_child_dies_with_the_call(server: Server) -> None:
    """Issue 29: a setsid() child survived the process-group kill."""
    marker = f"streamfold-orphan-{uuid.uuid4().hex}"
    logs = server.run(
        "import subprocess, sys\n"
        "try:\n"
        f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}],"
        " start_new_session=True)\n"
        "    print('started')\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
    )
    left = _host_processes_with(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], logs


def test_a_fork_bomb_is_bounded(server: Server) -> None:
    """Issue 29: 300 forks hit no limit."""
    logs = server.run(
        "import os, time\n"
        "forks = 0\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        forks += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print('forks', forks)\n"
    )
    assert "forks 0" in logs, logs


def test_threads_still_work(server: Server) -> None:
    logs = server.run(
        "import threading\n"
        "out = []\n"
        "ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(sorted(out))\n"
    )
    assert "[0, 1, 2, 3, 4, 5, 6, 7]" in logs


def test_serve_refuses_the_python_tool_without_bwrap(tmp_path: Path) -> None:
    """No silent downgrade: without bubblewrap `--python-tool` stops the server, one line."""
    done = subprocess.run(
        [sys.executable, "-m", "streamfold", "serve", "--python-tool", "--port", "0"],
        env=dict(os.environ, PATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "streamfold serve: --python-tool: the python tool runs code in a bubblewrap sandbox, "
        "and `bwrap` is not on PATH: install it (Debian/Ubuntu: apt-get install bubblewrap; "
        "Fedora: dnf install bubblewrap)"
    ]


def test_nothing_outside_the_scratch_is_writable(server: Server) -> None:
    """Found while fixing issue 29: the sandbox's root and /dev are tmpfs mounts of no fixed
    size, and were writable, so a call could fill the host's memory with files (each under the
    file size limit, as many as it liked) outside its sized scratch."""
    logs = server.run(
        "for path in ['/big', '/dev/big', '/dev/shm/big', '/usr/big']:\n"
        "    try:\n"
        "        open(path, 'wb').write(b'x' * 1024)\n"
        "        print(path, 'WROTE')\n"
        "    except OSError as exc:\n"
        "        print(path, 'refused', exc.errno)\n"
    )
    assert "WROTE" not in logs, logs
    assert logs.count("refused") == 4


def test_the_code_cannot_trace_the_sandboxs_own_init(server: Server) -> None:
    """Found while fixing issue 29: the code could ptrace bwrap's pid 1 in the sandbox (same
    user), the one process there that set the sandbox up."""
    logs = server.run(
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
    )
    assert "ptrace -1 1" in logs, logs  # EPERM
