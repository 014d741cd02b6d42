"""`--mcp-allow`: which MCP URLs a request may make the server call, decided on parsed URLs.

A string prefix is not an allow-list: `http://127.0.0.1:19250` is a prefix of
`http://127.0.0.1:19250@127.0.0.1:19251/mcp` (userinfo, then another port), and
`http://h/mcp` of `http://h/mcp/../internal/admin` (which an HTTP client sends as
`/internal/admin`) and of `http://h/mcpx`. So both the rule and the URL are parsed and put in
one form (`normal_url`): scheme and host lowercased, the port made explicit, dot segments
removed, no userinfo, no fragment. A URL is allowed when a rule has the same scheme, host and
port, and the rule's path is a prefix of the URL's path *by whole segments*.

Refused outright, whatever the rules: userinfo (`user:pass@`), a path with encoded dots,
slashes or backslashes (`%2e`, `%2f`, `%5c`, `\\`: servers disagree on decoding them), and
anything but http and https. The same check runs on every HTTP request the MCP client sends
(`McpTool`), so the SSE transport's message endpoint, named by the server, is held to it too.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import attrs

__all__ = ["AllowList", "UrlRefused", "normal_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ENCODED_TRICKS = re.compile(r"%2e|%2f|%5c|\\", re.IGNORECASE)


class UrlRefused(ValueError):
    """A URL that no allow-list may let through; the message says why."""


@attrs.frozen
class NormalUrl:
    scheme: str
    host: str
    port: int
    path: str  # starts with "/", dot segments removed
    query: str

    def __str__(self) -> str:
        default = _DEFAULT_PORTS[self.scheme] == self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        netloc = host if default else f"{host}:{self.port}"
        return urlunsplit((self.scheme, netloc, self.path, self.query, ""))


def _remove_dot_segments(path: str) -> str:
    # RFC 3986 5.2.4, as HTTP clients apply it before sending.
    trailing = path.endswith(("/", "/.", "/.."))
    normal = posixpath.normpath(path) if path else "/"
    if normal.startswith("//"):  # normpath keeps a leading "//"
        normal = "/" + normal.lstrip("/")
    if trailing and normal != "/":
        normal += "/"
    return normal


def normal_url(url: str) -> NormalUrl:
    """`url` in the one form rules and requests are compared in; raises `UrlRefused`."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"{url!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise UrlRefused(f"{url!r} is not an http:// or https:// URL")
    if "@" in parts.netloc:
        raise UrlRefused(f"{url!r} carries userinfo (user:password@); give credentials in headers")
    if not parts.hostname:
        raise UrlRefused(f"{url!r} names no host")
    if _ENCODED_TRICKS.search(parts.path):
        raise UrlRefused(
            f"{url!r} has an encoded '.', '/' or '\\' in its path; write the path plainly"
        )
    return NormalUrl(
        scheme=scheme,
        host=parts.hostname.lower(),
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        path=_remove_dot_segments(parts.path or "/"),
        query=parts.query,
    )


def _under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or not prefix


@attrs.frozen
class AllowList:
    """The operator's rules (`--mcp-allow`), parsed once; `"*"` allows any http(s) URL."""

    rules: tuple[NormalUrl, ...]
    any_url: bool = False

    @classmethod
    def parse(cls, entries: Sequence[str]) -> AllowList:
        """Raises `UrlRefused` naming an entry that is not an http(s) URL without userinfo,
        query or fragment."""
        rules = []
        for entry in entries:
            if entry == "*":
                continue
            rule = normal_url(entry)
            if rule.query or "#" in entry:
                raise UrlRefused(f"--mcp-allow {entry!r}: a rule has no query or fragment")
            rules.append(rule)
        return cls(tuple(rules), any_url="*" in entries)

    def check(self, url: str) -> NormalUrl:
        """The URL as it will be requested, if a rule allows it; else raises `UrlRefused`."""
        normal = normal_url(url)
        if self.any_url:
            return normal
        for rule in self.rules:
            if (rule.scheme, rule.host, rule.port) == (normal.scheme, normal.host, normal.port):
                if _under(normal.path, rule.path):
                    return normal
        raise UrlRefused(f"{url!r} is not under any --mcp-allow rule")
