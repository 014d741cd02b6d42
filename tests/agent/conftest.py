from __future__ import annotations

from collections.abc import Iterator

import pytest

from .mcp_server import McpServerRun, running_mcp_server


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpServerRun]:
    with running_mcp_server() as run:
        yield run


@pytest.fixture(scope="module")
def mcp_sse_server() -> Iterator[McpServerRun]:
    with running_mcp_server("sse") as run:
        yield run
