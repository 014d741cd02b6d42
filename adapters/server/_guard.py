"""Who may use the server: API keys, the `Host` a request names, and whose responses it may see.

Threat (issue 29): without keys anyone who reaches the port may run the model and the
server-side tools; a web page can drive a server on localhost (a `text/plain` POST needs no
CORS preflight, and DNS rebinding makes the browser send `Host: attacker.example:PORT` to
127.0.0.1); and every item id embeds its response id, so whoever sees one id can read,
continue or delete that response. So `Guard`, an ASGI middleware around the app:

- with API keys (`--api-key`, `STREAMFOLD_API_KEY`), answers 401 to a request without
  `Authorization: Bearer <one of them>` (`GET /health` excepted: probes carry no key);
- answers 421 to a request whose `Host` names neither the address the connection came in on
  (`localhost` too when that is a loopback address) nor a name the operator listed
  (`--allowed-host`); the name is compared, not the port (a rebinding page can name its own
  host, not change the port its request goes to);
- answers 415 to a POST whose body is not `application/json`;
- runs the request with its key's hash in `OWNER` (a context variable), which `OwnedStore`
  reads: a response belongs to the key that made it (the hash, never the key, is stored with
  it), and is a 404 for any other key on every endpoint that names it by id, and invisible to
  `previous_response_id` and `item_reference` (those read the store through `OwnedStore`).
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..protocol import RequestError
from ._store import EventStore

__all__ = ["OWNER", "Guard", "OwnedStore", "key_hash"]

#: The hash of the API key the current request carries (None: no keys, or the server itself).
OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("streamfold_owner", default=None)

#: Owners of responses made and not yet written, kept at most (see `OwnedStore`).
PENDING_KEPT = 100_000

_BY_ID = re.compile(r"^/v1/responses/([^/]+)(?:/(?:input_items|cancel))?/?$")


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class OwnedStore:
    """The store as one key sees it: responses made under another key do not exist.

    A response's owner is recorded when its id is made (`owned_id`, in the request's
    context) and written to the store with the response's first write. Inside the server
    (no `OWNER`: the log writer, recovery at start-up) everything is visible."""

    def __init__(self, inner: EventStore, new_id: Callable[[], str]) -> None:
        self.inner = inner
        self._new_id = new_id
        # Made, not yet written to the store (a `store: false` response never is: the oldest
        # are dropped past PENDING_KEPT, long after such a response has ended).
        self._pending: dict[str, str] = {}
        # Only for a store that cannot keep owners itself (no `set_owner`): kept here.
        self._owners: dict[str, str] = {}
        self._keeps = callable(getattr(inner, "set_owner", None))

    def __getattr__(self, name: str) -> Any:  # what the wrapper adds nothing to
        return getattr(self.inner, name)

    def owned_id(self) -> str:
        response_id = self._new_id()
        owner = OWNER.get()
        if owner is not None:
            self._pending[response_id] = owner
            while len(self._pending) > PENDING_KEPT:
                self._pending.pop(next(iter(self._pending)))
        return response_id

    async def owner_of(self, response_id: str) -> str | None:
        if response_id in self._pending:
            return self._pending[response_id]
        if self._keeps:
            return await self.inner.owner_of(response_id)  # type: ignore[attr-defined, no-any-return]
        return self._owners.get(response_id)

    async def visible(self, response_id: str) -> bool:
        owner = OWNER.get()
        return owner is None or await self.owner_of(response_id) == owner

    async def _written(self, response_id: str) -> None:
        owner = self._pending.pop(response_id, None)
        if owner is None:
            return
        if self._keeps:
            await self.inner.set_owner(response_id, owner)  # type: ignore[attr-defined]
        else:
            self._owners[response_id] = owner

    async def append(self, response_id: str, records: Any, *, background: bool = False) -> None:
        await self._written(response_id)
        await self.inner.append(response_id, records, background=background)

    async def append_many(self, batches: Sequence[Any]) -> list[Exception | None]:
        for batch in batches:
            await self._written(batch[0])
        many = getattr(self.inner, "append_many", None)
        if many is not None:
            return await many(batches)  # type: ignore[no-any-return]
        errors: list[Exception | None] = []  # as the log writer does without it
        for response_id, records, background in batches:
            try:
                await self.inner.append(response_id, records, background=background)
                errors.append(None)
            except Exception as exc:
                errors.append(exc)
        return errors

    async def read(self, response_id: str, after: int = -1, *, limit: int | None = None) -> Any:
        if not await self.visible(response_id):
            return []
        return await self.inner.read(response_id, after, limit=limit)

    async def snapshot(self, response_id: str) -> Any:
        if not await self.visible(response_id):
            return None
        return await self.inner.snapshot(response_id)

    async def delete(self, response_id: str) -> None:
        if await self.visible(response_id):
            await self.inner.delete(response_id)
            self._owners.pop(response_id, None)
            self._pending.pop(response_id, None)

    async def list(self) -> list[str]:
        return await self.inner.list()

    async def save_input(self, response_id: str, items: str) -> None:
        await self._written(response_id)
        await self.inner.save_input(response_id, items)  # type: ignore[attr-defined]

    async def load_input(self, response_id: str) -> str | None:
        if not await self.visible(response_id):
            return None
        return await self.inner.load_input(response_id)  # type: ignore[attr-defined, no-any-return]


def _error(send: Any, error: RequestError, scope: Any = None) -> Any:
    """The refusal as an HTTP response; a WebSocket handshake gets the same one where the
    server can send it (ASGI's `websocket.http.response`), else a plain 403."""
    body = json.dumps(error.body()).encode()
    prefix = "http"
    if scope is not None and scope["type"] == "websocket":
        prefix = "websocket.http"
        if "websocket.http.response" not in scope.get("extensions", {}):
            return send({"type": "websocket.close", "code": 1008})

    async def answer() -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if error.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="streamfold"'))
        start = {"type": f"{prefix}.response.start", "status": error.status, "headers": headers}
        await send(start)
        await send({"type": f"{prefix}.response.body", "body": body})

    return answer()


def _host_name(host: str) -> str:
    """The name part of a `Host` header: `[::1]:8000` -> `::1`, `a.example:80` -> `a.example`."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@functools.lru_cache(maxsize=64)  # a server listens on a few addresses; parsed once each
def _server_names(address: str) -> frozenset[str]:
    # The name, not the port: a rebinding page names its own host; the port it cannot change.
    names = {address.lower()}
    try:
        if ipaddress.ip_address(address).is_loopback:
            names.add("localhost")
    except ValueError:
        pass
    return frozenset(names)


class Guard:
    """The ASGI middleware of the module docstring."""

    def __init__(
        self,
        app: Any,
        *,
        api_keys: Sequence[str] = (),
        allowed_hosts: Sequence[str] = (),
        store: OwnedStore | None = None,
    ) -> None:
        self.app = app
        self.hashes = [key_hash(key) for key in api_keys]
        self.allowed_hosts = {host.lower() for host in allowed_hosts}
        self.store = store

    def _owner(self, headers: dict[bytes, bytes]) -> str | None:
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = key_hash(token.strip())
        # Compared with every key, in constant time each: no early exit to time.
        matched = [h for h in self.hashes if hmac.compare_digest(h, given)]
        return matched[0] if matched else None

    def _refusal(self, scope: Any, headers: dict[bytes, bytes]) -> RequestError | None:
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        server = scope.get("server")
        name = _host_name(host)
        if server and name not in self.allowed_hosts and name not in _server_names(server[0]):
            return RequestError(
                f"this server does not answer for host {host[:100]!r}; its operator lists the "
                "names it answers for with `streamfold serve --allowed-host NAME`",
                status=421,
                code="misdirected_request",
            )
        if scope["type"] == "websocket":
            # A browser lets any page open a socket to any host (no CORS, no preflight), but
            # says which page did (`Origin`): only this server's own pages (the host and port
            # the request names) and the operator's allowed hosts may.
            origin = headers.get(b"origin", b"").decode("latin-1").strip().lower()
            parts = urlsplit(origin)
            own = parts.netloc == host or parts.hostname in self.allowed_hosts
            if origin and not own:
                return RequestError(
                    f"a WebSocket opened by a page of {origin[:100]!r} is refused; its operator "
                    "lists the names it answers for with `streamfold serve --allowed-host NAME`",
                    status=403,
                    code="origin_not_allowed",
                )
        elif scope["method"] == "POST" and _has_body(headers):
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind != b"application/json":
                return RequestError(
                    "a POST body must be JSON, sent with `content-type: application/json`",
                    status=415,
                    code="unsupported_media_type",
                )
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _error(send, refusal, scope)
            return
        owner = None
        if self.hashes and scope["path"] != "/health":
            owner = self._owner(headers)
            if owner is None:
                await _error(
                    send,
                    RequestError(
                        "a valid API key is required: send `Authorization: Bearer <key>`",
                        status=401,
                        type="invalid_request_error",
                        code="invalid_api_key",
                    ),
                    scope,
                )
                return
        token = OWNER.set(owner)
        try:
            found = _BY_ID.match(scope["path"])
            if owner is not None and found and self.store is not None:
                response_id = found.group(1)
                if await self.store.owner_of(response_id) != owner:
                    await _error(
                        send,
                        RequestError(
                            f"Response with id '{response_id[:64]}' not found.",
                            param="response_id",
                            status=404,
                        ),
                    )
                    return
            await self.app(scope, receive, send)
        finally:
            OWNER.reset(token)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    if length is not None:
        return length.strip() not in (b"", b"0")
    return b"transfer-encoding" in headers
