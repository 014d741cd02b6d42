"""`streamfold serve --engine vllm|sglang` with the stand-in engines, for tests that need a real
server process (signals, start-up): `python tests/adapters/standin_serve.py GATE serve ...`.

The stand-in engine's build waits until the file GATE exists, as a real one loads its model;
it then answers every request with a short harmony answer. The engine's `shutdown()` prints
"stand-in engine: shutdown" on stderr. SGLang's stand-in models its SIGTERM handler and
watchdog (`fakes_sglang`), with a 50 ms watchdog tick in place of 5 s.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamfold.adapters import SGLangTokenSource, VLLMTokenSource, engine_args
from streamfold.cli import main
from tests.adapters import fakes_sglang, fakes_vllm

# <|channel|>final<|message|>$%&<|return|>
ANSWER = [[200005, 35644], [200008], [3, 4, 5], [200002]]


def _wait_for(gate: Path) -> None:
    print(f"stand-in engine: loading in thread {threading.current_thread().name}", file=sys.stderr)
    while not gate.exists():
        time.sleep(0.02)


class _Shutdown:
    def shutdown(self, *args: Any) -> None:
        print("stand-in engine: shutdown", file=sys.stderr, flush=True)


class _VLLM(_Shutdown, fakes_vllm.FakeAsyncLLM):
    pass


class _SGLang(_Shutdown, fakes_sglang.FakeSGLangEngine):
    pass


def _builders(gate: Path) -> dict[str, Any]:
    def vllm(model: str, **options: Any) -> VLLMTokenSource:
        _wait_for(gate)
        engine = _VLLM({}, default=fakes_vllm.Script(steps=ANSWER, stop_reason=200002))
        return VLLMTokenSource(engine, api=fakes_vllm.API)

    def sglang(model: str, **options: Any) -> SGLangTokenSource:
        _wait_for(gate)
        manager = fakes_sglang.FakeTokenizerManager(sigterm_watchdog_interval=0.05)
        script = fakes_sglang.Script(steps=ANSWER, finish={"type": "stop", "matched": 200002})
        return SGLangTokenSource(_SGLang({}, manager, default=script))

    return {"vllm": vllm, "sglang": sglang}


def run(argv: list[str]) -> int:
    gate, args = Path(argv[0]), argv[1:]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    engine_args.ENGINE_BUILDERS.update(_builders(gate))
    real_find_spec = importlib.util.find_spec
    # `--engine vllm|sglang` checks that the package is installed before anything else.
    importlib.util.find_spec = lambda name, *rest: (  # type: ignore[assignment]
        object() if name in ("vllm", "sglang") else real_find_spec(name, *rest)
    )
    return main(args)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
