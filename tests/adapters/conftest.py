import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every adapter test runs under asyncio and under trio (anyio's pytest plugin)."""
    return str(request.param)
