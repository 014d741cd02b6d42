"""`--mcp-allow` decided on parsed URLs (issue 29, finding 3), over the real socket: the
official openai client, real MCP servers built with the `mcp` SDK on 127.0.0.1."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import OpenAI

from streamfold.adapters.agent._allow import AllowList, UrlRefused, normal_url
from streamfold.adapters.agent._config import AgentConfig
from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.serving import serve

from .mcp_server import McpServerRun, build_server, running_mcp_server
from .scripted import ScriptedAgentSource


@contextlib.contextmanager
def trap_server() -> Iterator[tuple[McpServerRun, list[dict[str, str]]]]:
    """An MCP server at /mcp, a 307 from /redirect/mcp to /internal/secret, and
    /internal/* recording the headers of every request that reaches it."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, RedirectResponse
    from starlette.routing import Mount, Route

    run = McpServerRun(url="", headers_seen=[], calls=[], started=[])
    secret_seen: list[dict[str, str]] = []
    inner = build_server(run).streamable_http_app()

    async def redirect(request: Any) -> Any:
        return RedirectResponse("/internal/secret", status_code=307)

    async def internal(request: Any) -> Any:
        secret_seen.append(dict(request.headers))
        return JSONResponse({"secret": "s3cr3t"})

    methods = ["GET", "POST", "DELETE"]
    app = Starlette(
        routes=[
            Route("/redirect/mcp", redirect, methods=methods),
            Route("/internal/{rest:path}", internal, methods=methods),
            Mount("/", inner),
        ],
        lifespan=inner.router.lifespan_context,
    )
    with serve(app) as url:
        run.url = url
        yield run, secret_seen


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[OpenAI, McpServerRun, list[dict[str, str]], McpServerRun]]:
    source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>hi<|return|>"]})
    with trap_server() as (trap, secret_seen), running_mcp_server() as other:
        # As examples/agent_offline.py builds it: no trailing slash.
        config = AgentConfig(mcp_allow=(trap.url,))
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
        with serve(app) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
            yield client, trap, secret_seen, other


def _mcp(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "demo",
        "server_url": url,
        "require_approval": "never",
        "authorization": "bearer-for-mcp-only",
        **extra,
    }


def test_userinfo_cannot_send_the_server_to_another_port(servers: Any) -> None:
    """Issue 29: `http://127.0.0.1:A@127.0.0.1:B/mcp` passed the prefix `http://127.0.0.1:A`
    and the server connected to B."""
    client, trap, _, other = servers
    host_b = other.url.removeprefix("http://")
    before = len(other.headers_seen)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="hi", tools=[_mcp(f"{trap.url}@{host_b}/mcp")])
    assert caught.value.body["param"] == "tools[0].server_url"  # type: ignore[index]
    assert len(other.headers_seen) == before


def test_dot_segments_cannot_leave_the_allowed_path() -> None:
    """Issue 29: `--mcp-allow http://h/mcp` let `/mcp/../internal/admin` reach
    `/internal/admin`."""
    source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>hi<|return|>"]})
    with trap_server() as (trap, secret_seen):
        config = AgentConfig(mcp_allow=(f"{trap.url}/mcp",))
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
        with serve(app) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)
            for path in ("/mcp/../internal/admin", "/mcpx", "/mcp/%2e%2e/internal/admin"):
                with pytest.raises(openai.BadRequestError) as caught:
                    client.responses.create(model="m", input="hi", tools=[_mcp(trap.url + path)])
                assert caught.value.body["param"] == "tools[0].server_url"  # type: ignore[index]
            response = client.responses.create(
                model="m", input="hi", tools=[_mcp(trap.url + "/mcp/")]
            )
            assert response.output[0].type == "mcp_list_tools"
            assert response.output[0].error is None  # type: ignore[union-attr]
    assert secret_seen == []


def test_a_redirect_is_not_followed_with_the_authorization(servers: Any) -> None:
    """Issue 29: `307 /redirect/mcp -> /internal/secret` was followed, and the secret path
    received the request's bearer token."""
    client, trap, secret_seen, _ = servers
    response = client.responses.create(
        model="m", input="hi", tools=[_mcp(f"{trap.url}/redirect/mcp")]
    )
    listing = response.output[0]
    assert listing.type == "mcp_list_tools" and listing.error  # type: ignore[union-attr]
    assert secret_seen == []


@pytest.mark.parametrize("name", ["Host", "Cookie", "Connection", "Transfer-Encoding", "TE"])
def test_host_defining_and_hop_by_hop_headers_are_refused(servers: Any, name: str) -> None:
    """Issue 29: a request's `headers` could set `Host` and `Cookie`."""
    client, trap, _, _ = servers
    before = len(trap.headers_seen)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m",
            input="hi",
            tools=[_mcp(f"{trap.url}/mcp", headers={name: "evil.example"})],
        )
    assert caught.value.body["param"] == "tools[0].headers"  # type: ignore[index]
    assert len(trap.headers_seen) == before


def test_allow_rules() -> None:
    rules = AllowList.parse(["http://127.0.0.1:19250/mcp", "https://Tools.Example.org"])
    allowed = [
        "http://127.0.0.1:19250/mcp",
        "http://127.0.0.1:19250/mcp/",
        "http://127.0.0.1:19250/mcp/sub?x=1",
        "HTTP://127.0.0.1:19250/mcp/a/../b",
        "https://tools.example.org:443/anything",
    ]
    refused = [
        "http://127.0.0.1:19250@127.0.0.1:19251/mcp",
        "http://u:p@127.0.0.1:19250/mcp",
        "http://127.0.0.1:19250/mcp/../internal/admin",
        "http://127.0.0.1:19250/mcpx",
        "http://127.0.0.1:19250/MCP",
        "http://127.0.0.1:19251/mcp",
        "https://127.0.0.1:19250/mcp",
        "http://127.0.0.1:19250/mcp/%2e%2e/admin",
        "http://127.0.0.1:19250/mcp%2f..%2fadmin",
        "http://tools.example.org/anything",
        "file:///etc/passwd",
        "http://127.0.0.1:99999/mcp",
    ]
    for url in allowed:
        rules.check(url)
    for url in refused:
        with pytest.raises(UrlRefused):
            rules.check(url)
    with pytest.raises(UrlRefused):
        AllowList.parse(["http://user@host/"])
    assert str(rules.check("HTTP://127.0.0.1:19250/mcp/a/../b")) == "http://127.0.0.1:19250/mcp/b"


_segment = st.sampled_from(["mcp", "..", ".", "internal", "a", "", "mcpx"])


@given(st.lists(_segment, max_size=8))
def test_a_checked_url_stays_under_its_rule_as_sent(segments: list[str]) -> None:
    """Whatever the dot and empty segments, the URL the server sends (the normal form, not the
    request's) is under the rule's path by whole segments, and the HTTP client sends that very
    path (it normalises nothing further)."""
    import httpx2

    rules = AllowList.parse(["http://h:1/mcp"])
    url = "http://h:1/" + "/".join(segments)
    try:
        checked = rules.check(url)
    except UrlRefused:
        return
    assert checked.path == "/mcp" or checked.path.startswith("/mcp/")
    assert httpx2.URL(str(checked)).path == checked.path
    assert normal_url(str(checked)) == checked


def test_the_listing_error_is_no_probe_of_what_the_allow_list_lets_through(
    servers: Any,
) -> None:
    """Issue 29: the `mcp_list_tools` error echoed the target's HTTP status and content type,
    an oracle for probing whatever the allow-list lets through."""
    _, trap, _, _ = servers
    errors = []
    for path in ("/internal/admin", "/no/such/path", ":1/mcp"):
        url = trap.url + path if not path.startswith(":") else "http://127.0.0.1:1/mcp"
        rules = (trap.url, "http://127.0.0.1:1")
        config = AgentConfig(mcp_allow=rules)
        assert config.allows_url(url)
        source = ScriptedAgentSource({"m": ["<|channel|>final<|message|>hi<|return|>"]})
        app = create_app(source.engine(), store=MemoryEventStore(), agent=config)
        with serve(app) as base:
            own = OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=30)
            response = own.responses.create(model="m", input="hi", tools=[_mcp(url)])
        errors.append(response.output[0].error)  # type: ignore[union-attr]
    # The same words whatever answered: a JSON 200, a 404, a closed port.
    assert len(set(errors)) == 1, errors
    said = errors[0]
    assert "404" not in said and "application/json" not in said and "Connect" not in said
    assert "could not be reached, or did not answer as an MCP server" in said
