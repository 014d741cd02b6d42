"""The suite cannot pass quietly without its clients: where `STREAMFOLD_EXPECT_CLIENTS=1` (CI),
a missing node or client fails the test; elsewhere it skips with the command that installs it."""

from __future__ import annotations

import pytest

from .conftest import missing


def test_a_missing_client_fails_where_clients_are_expected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMFOLD_EXPECT_CLIENTS", "1")
    with pytest.raises(pytest.fail.Exception, match="STREAMFOLD_EXPECT_CLIENTS=1 but node"):
        missing("node", "install Node.js 20 or newer")


def test_a_missing_client_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMFOLD_EXPECT_CLIENTS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="npm ci"):
        missing("the JavaScript clients", "run `npm ci` in tests/clients/node")
