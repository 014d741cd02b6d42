"""API keys, the `Host` a request names, JSON bodies, and whose responses a key may see (issue
29, finding 2), over the real socket with the official openai client and raw httpx."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import openai
import pytest
from openai import OpenAI

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import SQLiteEventStore, create_app
from tests.ports import free_port

from .helpers import GREETING, LONG_ANSWER, write_traces
from .serving import serve

KEY_A, KEY_B = "sk-alice-0123456789", "sk-bob-9876543210"


@attrs.frozen
class Guarded:
    url: str
    store: Path

    def client(self, key: str) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=30)


@contextlib.contextmanager
def _serving(tmp_path: Path, **options: Any) -> Iterator[Guarded]:
    traces = write_traces(tmp_path / "traces", {"greeting": GREETING, "long": LONG_ANSWER})
    store_path = tmp_path / "store.sqlite3"
    store = SQLiteEventStore(store_path)
    engine = ReplayEngine(traces, delay=0.02).engine()
    try:
        with serve(create_app(engine, store=store, **options)) as url:
            yield Guarded(url=url, store=store_path)
    finally:
        store.close()


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Guarded]:
    with _serving(tmp_path, api_keys=[KEY_A, KEY_B]) as server:
        yield server


def test_keys_over_the_memory_store(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "traces", {"greeting": GREETING})
    app = create_app(ReplayEngine(traces).engine(), api_keys=[KEY_A, KEY_B])
    with serve(app) as url:
        alice = OpenAI(base_url=f"{url}/v1", api_key=KEY_A, max_retries=0)
        bob = OpenAI(base_url=f"{url}/v1", api_key=KEY_B, max_retries=0)
        made = alice.responses.create(model="greeting", input="hi")
        assert alice.responses.retrieve(made.id).output_text == made.output_text
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(made.id)


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[Guarded]:
    with _serving(tmp_path) as server:
        yield server


def test_a_web_page_cannot_drive_a_local_server(open_server: Guarded) -> None:
    """Issue 29: a POST with `content-type: text/plain`, `Origin: http://evil.example` and
    `Host: attacker.example:PORT` got a 200 (CSRF, DNS rebinding)."""
    body = b'{"model": "greeting", "input": "hi"}'
    port = open_server.url.rsplit(":", 1)[1]
    rebinding = httpx.post(
        f"{open_server.url}/v1/responses",
        content=body,
        headers={
            "content-type": "application/json",
            "origin": "http://evil.example",
            "host": f"attacker.example:{port}",
        },
    )
    assert rebinding.status_code == 421, rebinding.text
    assert rebinding.json()["error"]["code"] == "misdirected_request"
    simple_form = httpx.post(
        f"{open_server.url}/v1/responses",
        content=body,
        headers={"content-type": "text/plain", "origin": "http://evil.example"},
    )
    assert simple_form.status_code == 415, simple_form.text
    assert simple_form.json()["error"]["code"] == "unsupported_media_type"
    # The same request, as a client sends it, is served; localhost names this server too.
    ok = httpx.post(
        f"http://localhost:{port}/v1/responses",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert ok.status_code == 200 and ok.json()["status"] == "completed"


def test_an_operator_listed_host_is_served(tmp_path: Path) -> None:
    with _serving(tmp_path, allowed_hosts=["llm.internal"]) as server:
        reply = httpx.get(f"{server.url}/health", headers={"host": "llm.internal"})
        assert reply.status_code != 421
        reply = httpx.get(f"{server.url}/health", headers={"host": "other.internal"})
        assert reply.status_code == 421


def test_without_a_valid_key_a_401(keyed: Guarded) -> None:
    """Issue 29: there was no API-key option."""
    with pytest.raises(openai.AuthenticationError) as caught:
        keyed.client("sk-wrong").responses.create(model="greeting", input="hi")
    error: Any = caught.value.body
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    for headers in ({}, {"authorization": "Bearer"}, {"authorization": f"Basic {KEY_A}"}):
        reply = httpx.get(f"{keyed.url}/v1/responses/resp_x", headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{keyed.url}/health").status_code in (200, 503)  # probes need no key
    response = keyed.client(KEY_A).responses.create(model="greeting", input="hi")
    assert response.output_text == "Hello there, how can I help?"


def test_a_response_is_a_404_for_another_key_on_every_endpoint(keyed: Guarded) -> None:
    """Issue 29: every item id embeds its response id, so anyone who saw one could read,
    continue, list the input of, or delete that response."""
    alice, bob = keyed.client(KEY_A), keyed.client(KEY_B)
    made = alice.responses.create(model="greeting", input="hi")
    background = alice.responses.create(model="long", input="hi", background=True)
    message_id = made.output[-1].id
    attempts = [
        lambda: bob.responses.retrieve(made.id),
        lambda: bob.responses.input_items.list(made.id),
        lambda: bob.responses.delete(made.id),
        lambda: bob.responses.cancel(background.id),
        lambda: bob.responses.retrieve(background.id),
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError):
            attempt()
    for previous in (made.id, background.id):  # finished, and still running
        with pytest.raises(openai.NotFoundError) as caught:
            bob.responses.create(model="greeting", input="again", previous_response_id=previous)
        assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises((openai.NotFoundError, openai.BadRequestError)):
        bob.responses.create(model="greeting", input=[{"type": "item_reference", "id": message_id}])
    # The owner still has it all.
    assert alice.responses.retrieve(made.id).id == made.id
    assert alice.responses.input_items.list(made.id).data
    followed = alice.responses.create(model="greeting", input="again", previous_response_id=made.id)
    assert followed.previous_response_id == made.id
    alice.responses.cancel(background.id)
    alice.responses.delete(made.id)


def test_the_store_keeps_the_keys_hash_not_the_key(keyed: Guarded) -> None:
    made = keyed.client(KEY_A).responses.create(model="greeting", input="hi")
    db = sqlite3.connect(keyed.store)
    try:
        rows = db.execute("SELECT response_id, key_hash FROM owners").fetchall()
        dump = "\n".join(db.iterdump())
    finally:
        db.close()
    assert (made.id, hashlib.sha256(KEY_A.encode()).hexdigest()) in rows
    assert KEY_A not in dump and KEY_B not in dump


@pytest.mark.parametrize("with_key", [False, True])
def test_serve_says_local_use_only_without_a_key_and_reads_the_env_key(with_key: bool) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "STREAMFOLD_API_KEY"}
    if with_key:
        env["STREAMFOLD_API_KEY"] = KEY_A
    command = [sys.executable, "-m", "streamfold", "serve", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--store", ":memory:"], stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_x", timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None
                assert time.monotonic() < deadline, "streamfold serve did not start in 30 s"
                time.sleep(0.1)
        assert reply.status_code == (401 if with_key else 404)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=15)
    said = [line for line in stderr.splitlines() if "no API key" in line]
    assert len(said) == (0 if with_key else 1), stderr
    if not with_key:
        assert "no API key: local use only" in said[0]


def test_serve_takes_several_api_keys_each_its_own() -> None:
    """Issue 29 asks for `--api-key KEY`, repeatable; only the environment variable and
    `create_app(api_keys=...)` were run by a test. Both keys the command line names are
    served, a request without one is a 401, and nothing says "local use only"."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "STREAMFOLD_API_KEY"}
    command = [sys.executable, "-m", "streamfold", "serve", "--port", str(port)]
    command += ["--store", ":memory:", "--api-key", KEY_A, "--api-key", KEY_B]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, env=env, text=True)
    url = f"http://127.0.0.1:{port}/v1/responses/resp_x"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                anonymous = httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None
                assert time.monotonic() < deadline, "streamfold serve did not start in 30 s"
                time.sleep(0.1)
        keyed = [
            httpx.get(url, headers={"authorization": f"Bearer {key}"}, timeout=5).status_code
            for key in (KEY_A, KEY_B, "sk-neither")
        ]
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=15)
    assert anonymous.status_code == 401
    assert keyed == [404, 404, 401]  # each key is let in (and finds no such response)
    assert "no API key" not in stderr
