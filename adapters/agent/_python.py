"""The `python` tool: model-written code run in a subprocess, off unless the operator enables it.

What one call does:
- writes the code to `main.py` in a fresh scratch directory (removed afterwards), and runs it
  with the server's own interpreter in isolated mode (`python -I`: no `PYTHON*` variables, no
  user site-packages, the script's directory not on `sys.path`), its working directory and
  `HOME`/`TMPDIR` the scratch directory;
- gives it no inherited environment: only `PATH=/usr/bin:/bin`, `LANG=C.UTF-8` and those two;
- before the code runs, sets hard resource limits it cannot raise again: address space
  (`RLIMIT_AS`, the memory limit), CPU seconds (`RLIMIT_CPU`), the size of any file it writes
  (`RLIMIT_FSIZE`), no core files;
- starts it in its own session (process group), stdin closed; reads stdout and stderr together
  up to `output_bytes`; on the wall-clock limit, on too much output, or when the response is
  cancelled, kills the whole process group (SIGKILL) and waits for it;
- like a notebook cell, prints the value of a last bare expression.

What it does NOT isolate (run it inside a container or VM where that matters):
- the network: the code can open sockets and reach anything the server can;
- the filesystem: it can read every file the server's user can read, and write (up to the file
  size limit) wherever that user can write; only its working directory is fresh;
- other processes: it runs as the server's user, so it can signal that user's processes; a
  child that starts its own session escapes the process-group kill; the number of processes
  is not limited (RLIMIT_NPROC counts every process of the user, the server included);
- it is one fresh process per call: no state carries from one call to the next.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import attrs

from ._tool import ItemKind, ToolResult

__all__ = ["PythonLimits", "PythonTool"]

# Runs first in the child: limits, then the code (a last bare expression's value is printed).
_BOOTSTRAP = """\
import ast, resource, sys
memory, cpu, fsize = (int(v) for v in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
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
    """Limits of one python call (see the module docstring for what they cover)."""

    seconds: float = 30.0  # wall clock
    cpu_seconds: int = 30
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    output_bytes: int = 64 << 10


_DESCRIPTION = (
    "Use this tool to execute Python code in your chain of thought. When you send a message "
    "containing Python code to python, it is run in a fresh, stateless process, and its stdout "
    "and stderr are returned to you (the value of a last bare expression is printed). It times "
    "out after {seconds:g} seconds. Nothing is kept between calls."
)


def _kill_group(process: Any) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


class PythonTool:
    """Runs model-written code (see the module docstring). Enable it with
    `AgentConfig(python=PythonTool())`; a request then offers it with `code_interpreter`."""

    namespace = "python"
    kind: ItemKind = "code_interpreter_call"

    def __init__(self, limits: PythonLimits = PythonLimits(), *, executable: str | None = None):
        self.limits = limits
        self.executable = executable or sys.executable

    def describe(self) -> Any:
        import openai_harmony as h

        return h.ToolNamespaceConfig(
            name="python", description=_DESCRIPTION.format(seconds=self.limits.seconds), tools=[]
        )

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        scratch = Path(tempfile.mkdtemp(prefix="streamfold-python-"))
        try:
            (scratch / "main.py").write_text(arguments, encoding="utf-8")
            return await self._run(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    async def _run(self, scratch: Path) -> ToolResult:
        limits = self.limits
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
        }
        command = [
            self.executable,
            "-I",
            "-u",  # unbuffered: stdout and stderr interleave as the code wrote them
            "-c",
            _BOOTSTRAP,
            str(limits.memory_bytes),
            str(limits.cpu_seconds),
            str(limits.file_bytes),
        ]
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=scratch,
            env=env,
            start_new_session=True,
        )
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
