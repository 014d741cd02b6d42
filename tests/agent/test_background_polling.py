"""Issue 31: polling a running background response showed `output: []` while its stream
already had items. A GET made once the stream has sent an item's `output_item.done` shows that
item (the response is still generating: many slow tokens follow)."""

from __future__ import annotations

import json

import httpx

from streamfold.adapters.server import MemoryEventStore, create_app
from tests.server.serving import serve

from .scripted import ScriptedAgentSource

SCRIPT = (
    "<|channel|>analysis<|message|>First I think.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>" + "word " * 200 + "<|return|>"
)


def test_polling_a_running_background_response_shows_its_items() -> None:
    source = ScriptedAgentSource({"m": [SCRIPT]}, per_chunk=1, delay=0.01)
    app = create_app(source.engine(), store=MemoryEventStore())
    with serve(app) as url, httpx.Client(timeout=60) as client:
        created = client.post(
            f"{url}/v1/responses", json={"model": "m", "input": "hi", "background": True}
        ).json()
        stream = f"{url}/v1/responses/{created['id']}?stream=true"
        with client.stream("GET", stream) as events:
            for line in events.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "response.output_item.done":
                    polled = client.get(f"{url}/v1/responses/{created['id']}").json()
                    break
    assert polled["status"] == "in_progress"
    assert polled["output"][0]["id"] == event["item"]["id"]
    assert polled["output"][0]["content"][0]["text"] == "First I think."
