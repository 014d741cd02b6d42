from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from openai import OpenAI

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import SQLiteEventStore, create_app

from .helpers import GREETING, LONG_ANSWER, WEATHER_CALL, ScriptedEngine, write_traces
from .serving import serve

TRACES = {
    "greeting": GREETING,
    "weather_call": WEATHER_CALL,
    "long": LONG_ANSWER,
    "slow": LONG_ANSWER,
    "broken": LONG_ANSWER,
}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_traces(tmp_path_factory.mktemp("traces"), TRACES)


@attrs.define
class Server:
    url: str
    client: OpenAI
    engine: ScriptedEngine
    store_path: Path
    app: object


def make_engine(trace_dir: Path) -> ScriptedEngine:
    return ScriptedEngine(
        ReplayEngine(trace_dir), delays={"slow": 0.02, "long": 0.002}, broken={"broken"}
    )


@pytest.fixture(scope="module")
def server(trace_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real uvicorn server per test module, on a SQLite event log."""
    engine = make_engine(trace_dir)
    store_path = tmp_path_factory.mktemp("store") / "responses.sqlite3"
    store = SQLiteEventStore(store_path)
    app = create_app(engine.engine(), store=store)
    with serve(app) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
        yield Server(url=url, client=client, engine=engine, store_path=store_path, app=app)
    store.close()
