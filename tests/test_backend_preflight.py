"""The quick check before a configuration change lets the loaded models go (:func:`lsp_server.backends.loading.preflight`)
and the settings kept when it refuses (:meth:`lsp_server.settings.Settings.with_backend_of`); the server's
side is tested over a real client in :mod:`tests.test_runtime_settings`."""

from __future__ import annotations

import socket
from dataclasses import fields, replace

import pytest

from decoding.weights import model_names
from lsp_server.backends.loading import preflight
from lsp_server.settings import Settings
from lsp_server.settings.spec import BACKEND_FIELDS
from tests.cache_child import fake_pack

pytestmark = pytest.mark.unit

STARTER = Settings(model="starter", draft_model="starter-draft")


def listening_port() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, server.getsockname()[1]


def test_local_names_that_name_nothing_are_found_without_loading(tmp_path, monkeypatch):
    assert preflight(STARTER.backend_config()) is None
    assert preflight(replace(STARTER, draft_model="none").backend_config()) is None
    assert "does not exist" in preflight(replace(STARTER, model=str(tmp_path / "gone")).backend_config())
    assert "does not exist" in preflight(replace(STARTER, draft_model=str(tmp_path / "gone.gguf")).backend_config())
    assert "no config.json" in preflight(replace(STARTER, model=str(tmp_path)).backend_config())
    assert "unknown model 'qwen-coder'" in preflight(replace(STARTER, model="qwen-coder").backend_config())
    assert "does not exist" in preflight(replace(STARTER, next_edit_model=str(tmp_path / "gone")).backend_config())
    assert preflight(replace(STARTER, model="owner/a-hub-model").backend_config()) is None  # only a download can tell
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(model_names.PACKS, "fake-coder", fake_pack([b"GGUF"]))  # neither installed nor converted
    assert "is not installed" in preflight(replace(STARTER, model="fake-coder").backend_config())


def test_a_remote_engine_must_accept_a_connection(tmp_path):
    remote = replace(STARTER, backend="openai")
    assert "needs an endpoint" in preflight(remote.backend_config())
    server, port = listening_port()
    with server:
        assert preflight(replace(remote, endpoint=f"http://127.0.0.1:{port}/v1").backend_config()) is None
    problem = preflight(replace(remote, endpoint=f"http://127.0.0.1:{port}").backend_config())
    assert "does not accept connections" in problem and "Connection refused" in problem
    assert "does not exist" in preflight(replace(remote, endpoint=f"http://127.0.0.1:{port}",
                                                 model=str(tmp_path / "gone")).backend_config())


def test_with_backend_of_takes_exactly_the_fields_a_reload_depends_on():
    new = replace(STARTER, model="elsewhere", backend="openai", endpoint="http://x:1", max_new_tokens=4)
    kept = new.with_backend_of(STARTER)
    assert kept.backend_config() == STARTER.backend_config() and kept.max_new_tokens == 4
    others = [f.name for f in fields(Settings) if f.name not in BACKEND_FIELDS]
    assert all(getattr(kept, name) == getattr(new, name) for name in others)
