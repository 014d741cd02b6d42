"""The browser tool over the in-memory backend: search, open a result, find in the page."""

from __future__ import annotations

import json

import pytest

from streamfold.adapters.agent import BrowserTool, StaticBrowserBackend

pytestmark = pytest.mark.anyio

PAGES = {
    "https://example.org/paris": ("Paris weather", "Paris today\nSunny, 21 C\nWind: light"),
    "https://example.org/oslo": ("Oslo weather", "Oslo today\nRain, 7 C"),
}


async def test_search_open_find() -> None:
    tool = BrowserTool(StaticBrowserBackend(PAGES))
    found = await tool.call("search", json.dumps({"query": "paris weather"}))
    assert found.output is not None
    assert found.output.startswith("[0] Search results for `paris weather` (search:paris weather)")
    assert "【0†Paris weather†example.org】" in found.output
    opened = await tool.call("open", json.dumps({"id": 0}))
    assert opened.output == (
        "[1] Paris weather (https://example.org/paris)\n"
        "**viewing lines [0 - 2] of 2**\n\n"
        "L0: Paris today\nL1: Sunny, 21 C\nL2: Wind: light"
    )
    match = await tool.call("find", json.dumps({"pattern": "sunny"}))
    assert match.output is not None and "L0: Sunny, 21 C" in match.output


async def test_errors_are_raised_for_the_loop_to_report() -> None:
    tool = BrowserTool(StaticBrowserBackend(PAGES))
    with pytest.raises(LookupError, match="no page is open yet"):
        await tool.call("find", json.dumps({"pattern": "x"}))
    with pytest.raises(LookupError, match="no page at https://nowhere"):
        await tool.call("open", json.dumps({"id": "https://nowhere"}))
    unknown = await tool.call("delete", "{}")
    assert unknown.error == "the browser has no function 'delete' (search, open, find)"
