"""The `python` tool: model-written code run in a bubblewrap sandbox, off unless the operator
enables it.

What one call does:
- waits for one of `PythonLimits.concurrent` slots (so the calls' memory together is bounded:
  `concurrent * (memory_bytes + scratch_bytes)`);
- starts `bwrap` (see `_sandbox.py` for what the sandbox isolates) with a clean environment of
  its own, which copies the code to `/sandbox/main.py` in a fresh size-limited tmpfs and runs
  it with the server's base interpreter in isolated mode (`python -I`);
- before the code runs, sets hard resource limits it cannot raise again: address space
  (`RLIMIT_AS`, the memory limit), CPU seconds (`RLIMIT_CPU`), the size of any file it writes
  (`RLIMIT_FSIZE`), open files, no core files;
- reads stdout and stderr together up to `output_bytes`; on the wall-clock limit, on too much
  output, or when the response is cancelled, kills bwrap's process group; the sandbox's pid
  namespace dies with it (`--die-with-parent`), every process in it included;
- like a notebook cell, prints the value of a last bare expression.

It is one fresh sandbox per call: no state carries from one call to the next. The code
cannot start processes (threads it can). The network is off unless the operator allows it
(`PythonTool(network=True)`, `streamfold serve --python-network`); then the code reaches what
the server's host reaches.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import anyio
import attrs

from ._sandbox import SandboxUnavailable, bwrap_argv, find_bwrap, seccomp_filter
from ._tool import ItemKind, ToolResult

__all__ = ["PythonLimits", "PythonTool"]

# Runs first in the sandbox: limits, then the code (a last bare expression's value is printed).
_BOOTSTRAP = """\
import ast, resource, sys
memory, cpu, fsize = (int(v) for v in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
sys.argv = ["main.py"]
source = open("main.py", encoding="utf-8").read()
tree = ast.parse(source, "main.py")
last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
scope = {"__name__": "__main__", "__file__": "main.py"}
exec(compile(tree, "main.py", "exec"), scope)
if last is not None:
    value = eval(compile(ast.Expression(last.value), "main.py", "eval"), scope)
    if value is not None:
        print(repr(value))
"""


@attrs.frozen(kw_only=True)
class PythonLimits:
    """Limits of the python tool (see the module docstring for what they cover)."""

    seconds: float = 30.0  # wall clock
    cpu_seconds: int = 30
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    output_bytes: int = 64 << 10
    #: The writable scratch folder's size (a tmpfs: it is memory).
    scratch_bytes: int = 64 << 20
    #: Calls that run at once (the rest wait, within the call's time limit).
    concurrent: int = 2


_DESCRIPTION = (
    "Use this tool to execute Python code in your chain of thought. When you send a message "
    "containing Python code to python, it is run in a fresh, stateless sandbox, and its stdout "
    "and stderr are returned to you (the value of a last bare expression is printed). It times "
    "out after {seconds:g} seconds. Nothing is kept between calls. {network}"
)


def _kill_group(process: Any) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # flags 0: no CLOEXEC, bwrap reads it after exec
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class PythonTool:
    """Runs model-written code in a sandbox (see the module docstring). Enable it with
    `AgentConfig(python=PythonTool())`; a request then offers it with `code_interpreter`.

    Raises `SandboxUnavailable` when `bwrap` is not installed: there is no unsandboxed mode."""

    namespace = "python"
    kind: ItemKind = "code_interpreter_call"

    def __init__(
        self,
        limits: PythonLimits = PythonLimits(),
        *,
        executable: str | None = None,
        network: bool = False,
    ):
        self.limits = limits
        self.network = network
        self.bwrap = find_bwrap()
        self.seccomp = seccomp_filter()
        # The base interpreter, not a virtualenv's: the sandbox binds its prefix (the stdlib),
        # and never the virtualenv or the source tree.
        base = getattr(sys, "_base_executable", None) or sys.executable
        self.executable = executable or os.path.realpath(base)
        self._slots = anyio.Semaphore(limits.concurrent)

    def probe(self) -> None:
        """Start one empty sandbox now, so a server refuses to start (rather than fail each
        call) where namespaces are refused. Raises `SandboxUnavailable` with bwrap's words."""
        seccomp = _memfd("seccomp", self.seccomp)
        try:
            argv = bwrap_argv(
                self.bwrap,
                seccomp_fd=seccomp,
                scratch_bytes=self.limits.scratch_bytes,
                network=self.network,
            )
            done = subprocess.run(
                [*argv, self.executable, "-I", "-c", "pass"],
                pass_fds=(seccomp,),
                env={},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        finally:
            os.close(seccomp)
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
            raise SandboxUnavailable(
                f"the python sandbox does not start here ({said}); bubblewrap needs "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
                "a container run with them allowed)"
            )

    def describe(self) -> Any:
        import openai_harmony as h

        network = "It has network access." if self.network else "It has no network access."
        description = _DESCRIPTION.format(seconds=self.limits.seconds, network=network)
        return h.ToolNamespaceConfig(name="python", description=description, tools=[])

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        async with self._slots:
            return await self._run(arguments)

    async def _run(self, code: str) -> ToolResult:
        limits = self.limits
        seccomp = _memfd("seccomp", self.seccomp)
        source = _memfd("main.py", code.encode("utf-8", errors="surrogatepass"))
        try:
            argv = bwrap_argv(
                self.bwrap,
                seccomp_fd=seccomp,
                scratch_bytes=limits.scratch_bytes,
                network=self.network,
                files=((source, "main.py"),),
            )
            command = [
                *argv,
                self.executable,
                "-I",
                "-u",  # unbuffered: stdout and stderr interleave as the code wrote them
                "-c",
                _BOOTSTRAP,
                str(limits.memory_bytes),
                str(limits.cpu_seconds),
                str(limits.file_bytes),
            ]
            # bwrap's own environment is empty too: its pid 1 in the sandbox keeps the
            # environment it was started with, and the code can read /proc/1/environ.
            process = await anyio.open_process(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={},
                start_new_session=True,
                pass_fds=(seccomp, source),
            )
        finally:
            os.close(seccomp)
            os.close(source)
        output = bytearray()
        cut = False
        try:
            with anyio.move_on_after(limits.seconds) as scope:
                assert process.stdout is not None  # stdout=PIPE
                async for data in process.stdout:
                    output += data
                    if len(output) > limits.output_bytes:
                        cut = True
                        break
                if not cut:
                    await process.wait()
        finally:
            # Also on cancellation: the code must not outlive the response that ran it.
            if process.returncode is None:
                _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()
        text = bytes(output[: limits.output_bytes]).decode("utf-8", errors="replace")
        if scope.cancelled_caught:
            return ToolResult(
                error=f"the code ran longer than {limits.seconds:g} s and was stopped",
                logs=text,
            )
        if cut:
            text += f"\n[output cut at {limits.output_bytes} bytes; the process was stopped]"
        elif process.returncode and process.returncode < 0:
            text += f"\n[the process was killed by signal {-process.returncode}]"
        return ToolResult(output=text, logs=text)
