"""The `browser` tool (`web_search_preview`): search, open and find over a pluggable backend.

streamfold ships no web access. A deployment gives a `BrowserBackend` (its search API and page
fetcher); with none, the tool is not offered and a request asking for `web_search_preview` is
refused. `StaticBrowserBackend` serves a fixed set of pages, for tests and offline demos.

The text the model reads follows the gpt-oss browser's layout (the one its tool description
promises): each page gets a cursor, shown as `[cursor] title (url)`, then numbered lines
`L0: ...`; search results are a page whose links read `【id†title†host】`, and `open` with an
integer `id` follows that link of the page at `cursor`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

import attrs

from ._tool import ItemKind, ToolResult

__all__ = ["BrowserBackend", "BrowserTool", "Page", "SearchResult", "StaticBrowserBackend"]

VIEW_LINES = 40


@attrs.frozen(kw_only=True)
class SearchResult:
    title: str
    url: str
    snippet: str = ""


@attrs.frozen(kw_only=True)
class Page:
    url: str
    title: str
    text: str
    links: tuple[str, ...] = ()  # urls the page links to, by link id


@runtime_checkable
class BrowserBackend(Protocol):
    """What a deployment provides: a search engine and a page fetcher. Either may raise; the
    model reads the error."""

    async def search(self, query: str, topn: int) -> Sequence[SearchResult]: ...

    async def open(self, url: str) -> Page: ...


class StaticBrowserBackend:
    """Pages held in memory (`{url: (title, text)}`); search matches every query word."""

    def __init__(self, pages: Mapping[str, tuple[str, str]]) -> None:
        self.pages = dict(pages)

    async def search(self, query: str, topn: int) -> Sequence[SearchResult]:
        words = [w.lower() for w in query.split()]
        hits = [
            SearchResult(title=title, url=url, snippet=text.splitlines()[0] if text else "")
            for url, (title, text) in self.pages.items()
            if all(w in (title + " " + text).lower() for w in words)
        ]
        return hits[:topn]

    async def open(self, url: str) -> Page:
        if url not in self.pages:
            raise LookupError(f"no page at {url}")
        title, text = self.pages[url]
        return Page(url=url, title=title, text=text)


def _arguments(raw: str) -> dict[str, Any]:
    value = json.loads(raw) if raw.strip() else {}
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


class BrowserTool:
    """The browser namespace over a `BrowserBackend`. One instance per response: it keeps the
    pages that response has seen, which the cursors number."""

    namespace = "browser"
    kind: ItemKind = "web_search_call"

    def __init__(self, backend: BrowserBackend, *, view_lines: int = VIEW_LINES) -> None:
        self.backend = backend
        self.view_lines = view_lines
        self.pages: list[Page] = []

    def describe(self) -> Any:
        import openai_harmony as h

        return h.ToolNamespaceConfig.browser()

    async def call(self, name: str | None, arguments: str) -> ToolResult:
        args = _arguments(arguments)
        if name == "search":
            return await self._search(str(args.get("query", "")), int(args.get("topn", 10)))
        if name == "open":
            return await self._open(args)
        if name == "find":
            return self._find(str(args.get("pattern", "")), int(args.get("cursor", -1)))
        return ToolResult(error=f"the browser has no function {name!r} (search, open, find)")

    def _page(self, cursor: int) -> Page:
        if not self.pages:
            raise LookupError("no page is open yet: search or open one first")
        if cursor == -1:
            return self.pages[-1]
        if not 0 <= cursor < len(self.pages):
            raise LookupError(f"no page with cursor {cursor}")
        return self.pages[cursor]

    def _show(self, page: Page, loc: int = 0, num_lines: int = -1) -> ToolResult:
        self.pages.append(page)
        cursor = len(self.pages) - 1
        lines = page.text.splitlines() or [""]
        start = max(0, min(loc, len(lines) - 1))
        end = min(len(lines), start + (num_lines if num_lines > 0 else self.view_lines))
        body = "\n".join(f"L{i}: {lines[i]}" for i in range(start, end))
        header = f"[{cursor}] {page.title} ({page.url})"
        view = f"**viewing lines [{start} - {end - 1}] of {len(lines) - 1}**"
        return ToolResult(output=f"{header}\n{view}\n\n{body}")

    async def _search(self, query: str, topn: int) -> ToolResult:
        results = await self.backend.search(query, max(1, min(topn, 50)))
        lines = []
        for i, result in enumerate(results):
            host = urlparse(result.url).netloc or result.url
            lines.append(f"* 【{i}†{result.title}†{host}】")
            if result.snippet:
                lines.append(f"  {result.snippet}")
        page = Page(
            url=f"search:{query}",
            title=f"Search results for `{query}`",
            text="\n".join(lines) or "No results.",
            links=tuple(result.url for result in results),
        )
        return self._show(page)

    async def _open(self, args: dict[str, Any]) -> ToolResult:
        target = args.get("id", -1)
        loc, num_lines = int(args.get("loc", -1)), int(args.get("num_lines", -1))
        if isinstance(target, str):
            url = target
        elif target == -1:  # scroll the page at `cursor`
            page = self._page(int(args.get("cursor", -1)))
            return self._show(page, max(loc, 0), num_lines)
        else:
            links = self._page(int(args.get("cursor", -1))).links
            if not 0 <= int(target) < len(links):
                raise LookupError(f"no link with id {target} on that page")
            url = links[int(target)]
        return self._show(await self.backend.open(url), max(loc, 0), num_lines)

    def _find(self, pattern: str, cursor: int) -> ToolResult:
        page = self._page(cursor)
        found = [
            line for line in page.text.splitlines() if re.search(re.escape(pattern), line, re.I)
        ]
        text = "\n".join(found) or f"No `{pattern}` found."
        return self._show(Page(url=page.url, title=f"Find `{pattern}` in {page.title}", text=text))
