"""Harmony message headers, parsed leniently.

A header is the text between `<|start|>` and `<|message|>`: an optional role word, a
`<|channel|>NAME` marker, an optional `to=RECIPIENT`, and an optional content type
(`<|constrain|>json`, or a bare word such as `code` after the recipient). Models get this wrong
in the wild (peers' bugs 41-51), so the parser never fails:

- every `<|channel|>X` marker is removed, and the first one names the channel, so a doubled
  marker cannot leak into a recipient (`manage_cart<|channel|>commentary`, bug 50);
- a recipient is cut at the first control token or space, and `<|constrain|>json` is never a
  recipient (bug 51);
- words it does not recognise are kept in `rest`, so a "header" that was really text can be
  shown instead of lost (bug 45).
"""

from __future__ import annotations

import re

import attrs

__all__ = ["Header", "parse_header"]

_CHANNEL = re.compile(r"<\|channel\|>([^\s<]*)")
_CONSTRAIN = "<|constrain|>"
_NOT_RECIPIENTS = frozenset({"", "assistant", "user", "system", "developer", "all"})


@attrs.frozen(kw_only=True)
class Header:
    role: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    rest: str = ""

    @property
    def is_header(self) -> bool:
        """Whether anything marks this as a real header rather than stray text."""
        return self.channel is not None or self.recipient is not None


def _clean_recipient(raw: str) -> str | None:
    recipient = raw.split("<|", 1)[0].strip()
    # `functions.` with its name cut off by a control token names no tool: no recipient, so
    # the message is routed by its channel and its text kept (not a call with an empty name).
    if recipient in _NOT_RECIPIENTS or recipient.endswith("."):
        return None
    return recipient


def parse_header(text: str, *, role_pending: bool) -> Header:
    """Parse header text (control tokens appear by name, e.g. `<|channel|>`)."""
    channels = _CHANNEL.findall(text)
    channel = channels[0] if channels and channels[0] else None
    text = _CHANNEL.sub(" ", text).replace(_CONSTRAIN, " " + _CONSTRAIN)
    parts = text.split()
    role = None
    if role_pending and parts and not parts[0].startswith(("to=", _CONSTRAIN, "<|")):
        role = parts.pop(0)
    recipient: str | None = None
    content_type: str | None = None
    rest: list[str] = []
    for part in parts:
        if part.startswith("to="):
            recipient = _clean_recipient(part[3:]) if recipient is None else recipient
        elif part.startswith(_CONSTRAIN):
            content_type = part[len(_CONSTRAIN) :] or content_type
        elif recipient is not None and content_type is None and not rest:
            content_type = part  # `to=python code`
        elif part.startswith("<|"):
            continue  # a stray control token is not text the model meant to show
        else:
            rest.append(part)
    return Header(
        role=role,
        channel=channel,
        recipient=recipient,
        content_type=content_type,
        rest=" ".join(rest),
    )
