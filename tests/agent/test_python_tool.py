"""The python tool's subprocess: what it runs, and the limits its module docstring promises."""

from __future__ import annotations

import os
import time

import anyio
import pytest

from streamfold.adapters.agent import PythonLimits, PythonTool

pytestmark = pytest.mark.anyio


async def _run(code: str, **limits: object) -> tuple[str | None, str | None]:
    tool = PythonTool(PythonLimits(**limits))  # type: ignore[arg-type]
    result = await tool.call(None, code)
    assert result.logs is not None
    return result.output, result.error


async def test_stdout_stderr_and_a_last_expression() -> None:
    output, error = await _run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7")
    assert error is None
    assert output == "out\nerr\n42\n"


async def test_a_traceback_is_output_the_model_reads() -> None:
    output, error = await _run("1 / 0")
    assert error is None
    assert output is not None and "ZeroDivisionError: division by zero" in output


async def test_no_inherited_environment_and_a_fresh_scratch_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMFOLD_SECRET", "hunter2")
    output, _ = await _run(
        "import os, pathlib\n"
        "pathlib.Path('note.txt').write_text('x')\n"
        "print(sorted(os.environ))\nprint(os.getcwd())\nprint(os.listdir('.'))"
    )
    assert output is not None
    names, cwd, listing, _ = output.split("\n")
    assert "STREAMFOLD_SECRET" not in names and "hunter2" not in output
    assert eval(names) == ["HOME", "LANG", "PATH", "PWD", "TMPDIR"]
    assert cwd == "/sandbox"  # a tmpfs of the sandbox's own, gone with it
    assert sorted(eval(listing)) == ["main.py", "note.txt"]


async def test_the_wall_clock_limit_kills_the_process() -> None:
    started = time.monotonic()
    code = "import time\nprint('before', flush=True)\ntime.sleep(60)"
    _output, error = await _run(code, seconds=1)
    assert time.monotonic() - started < 10
    assert error == "the code ran longer than 1 s and was stopped"


async def test_the_memory_limit() -> None:
    code = "x = bytearray(400 << 20)\nprint('allocated')"
    output, error = await _run(code, memory_bytes=200 << 20)
    assert error is None and output is not None
    assert "MemoryError" in output and "allocated" not in output


async def test_the_output_limit_stops_the_process() -> None:
    output, _error = await _run("while True:\n    print('y' * 1000)", output_bytes=10_000)
    assert output is not None
    assert output.endswith("[output cut at 10000 bytes; the process was stopped]")


async def test_the_file_size_limit() -> None:
    output, _ = await _run("open('big', 'wb').write(b'x' * (2 << 20))", file_bytes=1 << 20)
    # Python ignores SIGXFSZ, so the write fails instead of the process dying.
    assert output is not None and "OSError: [Errno 27] File too large" in output


async def test_calls_beyond_the_concurrency_cap_wait_for_a_slot() -> None:
    """Issue 29: five concurrent calls held 4 GB; the calls running at once are capped."""
    tool = PythonTool(PythonLimits(concurrent=2))
    running = peak = 0
    original = tool._run

    async def counting(code: str) -> object:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await original(code)
        finally:
            running -= 1

    tool._run = counting  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(tool.call, None, "import time\ntime.sleep(0.3)")
    assert peak == 2


async def test_cancelling_the_call_kills_the_process_group() -> None:
    tool = PythonTool(PythonLimits(seconds=60))
    code = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)"
    pids: list[int] = []
    original = anyio.open_process

    async def spying(*args: object, **kwargs: object) -> object:
        process = await original(*args, **kwargs)  # type: ignore[arg-type]
        pids.append(process.pid)
        return process

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(anyio, "open_process", spying)
        with anyio.move_on_after(1.5):
            await tool.call(None, code)
    assert pids
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)
