"""Stateless reasoning: a reasoning item's text sealed into its `encrypted_content`, and opened
again when a later request sends the item back.

A client that keeps nothing on the server (`store: false`, as Codex runs) still has to show
gpt-oss its own reasoning inside a tool-call chain, where harmony keeps it. It asks with
`include: ["reasoning.encrypted_content"]`; each reasoning item then carries the server's
authenticated encryption of the raw reasoning (AES-256-GCM, `cryptography`), on its done form
(`output_item.done` and the final Response), as the API sends it. Sent back, the blob is
opened and its text rendered as the analysis message it was; a blob that does not open (changed,
or sealed by another server) is a 400 naming the item.

Keys: `STREAMFOLD_REASONING_KEY` (one or more secrets, separated by commas or whitespace) or a
key file (`streamfold serve --reasoning-key-file`, one secret a line). The first key seals; all
open, so a key is rotated by putting the new one first and dropping the old one once no client
holds its blobs. Each secret is stretched to an AES key with HKDF-SHA256. With no key
configured, a random key is drawn per process: blobs then do not survive a restart.

Blob layout (base64): version byte 1, the sealing key's 4-byte id (its HKDF output's SHA-256
prefix, to pick the key without trying each), a 12-byte random nonce, then the ciphertext and
its tag. The associated data binds the blob to this purpose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from streamfold.statemachine import (
    Event,
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningItem,
    StreamfoldError,
)

from ..protocol import CreateRequest, ReasoningInput, ReasoningPart, RequestError

__all__ = [
    "ENCRYPTED_INCLUDE",
    "KEY_ENV",
    "ReasoningKeyError",
    "ReasoningKeys",
    "open_reasoning",
    "seal_events",
]

KEY_ENV = "STREAMFOLD_REASONING_KEY"
#: The `include` value that asks for sealed reasoning.
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
_VERSION = b"\x01"
_AAD = b"streamfold reasoning.encrypted_content v1"
_SPLIT = re.compile(r"[\s,]+")


class ReasoningKeyError(StreamfoldError, ValueError):
    """The reasoning keys cannot be read (an empty key file, an unreadable path)."""


def _derive(secret: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"streamfold reasoning")
    return hkdf.derive(secret.encode())


@attrs.frozen
class ReasoningKeys:
    """AES-256-GCM keys: the first seals, every one opens (see the module docstring)."""

    keys: tuple[bytes, ...] = attrs.field(repr=False)
    #: Whether the keys were drawn at random for this process (blobs die with it).
    ephemeral: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.keys or any(len(k) != 32 for k in self.keys):
            raise ReasoningKeyError("reasoning keys must be one or more 32-byte AES keys")

    @classmethod
    def from_secrets(cls, secrets: Iterable[str]) -> ReasoningKeys:
        keys = tuple(_derive(s) for s in secrets if s)
        if not keys:
            raise ReasoningKeyError(
                f"no reasoning key given; set {KEY_ENV} or write one secret a line in the file"
            )
        return cls(keys)

    @classmethod
    def random(cls) -> ReasoningKeys:
        return cls((os.urandom(32),), ephemeral=True)

    @classmethod
    def from_file(cls, path: str | Path) -> ReasoningKeys:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ReasoningKeyError(f"the reasoning key file {path} cannot be read: {exc}") from exc
        return cls.from_secrets(line.strip() for line in text.splitlines())

    @classmethod
    def from_environment(cls, environ: Any = None) -> ReasoningKeys:
        """The keys of `STREAMFOLD_REASONING_KEY`, or a random one for this process."""
        value = (os.environ if environ is None else environ).get(KEY_ENV, "").strip()
        if not value:
            return cls.random()
        return cls.from_secrets(_SPLIT.split(value))

    @staticmethod
    def _id(key: bytes) -> bytes:
        return hashlib.sha256(key).digest()[:4]

    def seal(self, text: str) -> str:
        key = self.keys[0]
        nonce = os.urandom(12)
        sealed = AESGCM(key).encrypt(nonce, text.encode(), _AAD)
        return base64.b64encode(_VERSION + self._id(key) + nonce + sealed).decode("ascii")

    def open(self, blob: str) -> str | None:
        """The text sealed in `blob`, or None when no key of these opens it."""
        try:
            raw = base64.b64decode(blob.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            return None
        if len(raw) < 1 + 4 + 12 + 16 or raw[:1] != _VERSION:
            return None
        key_id, nonce, sealed = raw[1:5], raw[5:17], raw[17:]
        for key in self.keys:
            if self._id(key) != key_id:
                continue
            try:
                return AESGCM(key).decrypt(nonce, sealed, _AAD).decode("utf-8")
            except (InvalidTag, UnicodeDecodeError):
                return None
        return None


def _sealed(item: Any, keys: ReasoningKeys) -> Any:
    if not isinstance(item, ResponseReasoningItem) or item.encrypted_content is not None:
        return item
    text = "".join(part.text for part in item.content or ())
    return attrs.evolve(item, encrypted_content=keys.seal(text))


_TERMINAL = (ResponseCompletedEvent, ResponseIncompleteEvent, ResponseFailedEvent)


def seal_events(
    events: Sequence[Event], keys: ReasoningKeys, sealed: dict[str, str]
) -> list[Event]:
    """`events` with each finished reasoning item sealed: on `output_item.done` and in the
    final Response's output. `sealed` (item id -> blob) is the run's, kept across its
    batches, so an item has one blob wherever it is shown."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, ResponseOutputItemDoneEvent) and isinstance(
            event.item, ResponseReasoningItem
        ):
            item = _sealed(event.item, keys)
            sealed[item.id] = item.encrypted_content or ""
            event = attrs.evolve(event, item=item)
        elif isinstance(event, _TERMINAL) and any(
            isinstance(item, ResponseReasoningItem) for item in event.response.output
        ):
            output = tuple(
                attrs.evolve(item, encrypted_content=sealed[item.id])
                if isinstance(item, ResponseReasoningItem) and item.id in sealed
                else _sealed(item, keys)
                for item in event.response.output
            )
            event = attrs.evolve(event, response=attrs.evolve(event.response, output=output))
        out.append(event)
    return out


def open_reasoning(request: CreateRequest, keys: ReasoningKeys, own: int) -> CreateRequest:
    """`request` with each sent-back reasoning item's `encrypted_content` opened into its text
    (an item that carries its text already keeps it). `own`: how many of the input's items are
    the body's own, so that a 400 names the body's position (`input[3].encrypted_content`)."""
    if not isinstance(request.input, tuple):
        return request
    items = list(request.input)
    offset = len(items) - own
    changed = False
    for i, item in enumerate(items):
        if not isinstance(item, ReasoningInput) or item.encrypted_content is None:
            continue
        if item.content:
            continue
        text = keys.open(item.encrypted_content)
        if text is None:
            at = f"input[{i - offset}]" if i >= offset else "previous_response_id"
            raise RequestError(
                "this reasoning item's encrypted_content was not sealed by this server's "
                "reasoning keys, or was changed; send the item as the server returned it (a "
                "server restarted without a configured key cannot open its earlier blobs)",
                param=f"{at}.encrypted_content" if i >= offset else at,
            )
        items[i] = attrs.evolve(item, content=(ReasoningPart(type="reasoning_text", text=text),))
        changed = True
    return attrs.evolve(request, input=tuple(items)) if changed else request
