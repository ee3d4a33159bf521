"""Small guards operators rely on: ids never end in a newline, an explicit API key setting replaces
the generated dev key, a port in TIME-WAIT is free, and the data dir is locked and made private."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from contracts.events import SubjectToken, is_subject_token
from services.cli.datadir import DataDirLock, make_private
from services.cli.servers.net import PortInUseError, ensure_port_free
from services.common.domain.owner import Owner
from services.common.runtime.settings import load_settings
from services.common.stores.dir_lock import DirInUse
from services.recall_api.auth import valid_id


@pytest.mark.parametrize("value", ["alice\n", "alice\r\n", "\nalice", "ali ce", "", "a" * 129, "a.b", "a*"])
def test_ids_with_a_trailing_newline_or_bad_characters_are_refused_everywhere(value: str) -> None:
    class Model(BaseModel):
        token: SubjectToken

    assert not is_subject_token(value)
    assert not valid_id(value)
    with pytest.raises(ValueError):
        Owner("acme", value)
    with pytest.raises(ValidationError):
        Model(token=value)


def test_good_ids_pass() -> None:
    assert is_subject_token("alice_01-x") and valid_id("A" * 128)
    assert Owner("acme", "alice").user_id == "alice"


def test_explicit_api_keys_replace_the_generated_dev_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"api_keys": {"tm_dev": "local"}, "http_port": 9123}))
    monkeypatch.delenv("TIERMEM_API_KEYS", raising=False)
    assert load_settings(tmp_path).api_keys == {"tm_dev": "local"}, "without a setting, the dev key works"
    monkeypatch.setenv("TIERMEM_API_KEYS", json.dumps({"tm_prod": "acme"}))
    settings = load_settings(tmp_path)
    assert settings.api_keys == {"tm_prod": "acme"}, "the dev key is revoked by an explicit setting"
    assert settings.http_port == 9123, "the rest of the stack file still applies"


def test_a_port_in_time_wait_is_free_but_a_listening_port_is_not() -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{port}"):
            ensure_port_free(port, "test")
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its port goes to TIME-WAIT
        client.close()
    # What the old check did, a bind without SO_REUSEADDR, fails on that port:
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))
    ensure_port_free(port, "test")


def test_data_dir_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    with DataDirLock(tmp_path / "data"), pytest.raises(DirInUse, match=f"pid {os.getpid()}"):
        DataDirLock(tmp_path / "data").acquire()
    with DataDirLock(tmp_path / "data"):
        pass  # released on exit: the next run gets it


def test_make_private_closes_up_an_old_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "falkordb").mkdir(parents=True)
    (data / "falkordb" / "appendonly.aof").write_text("memory text")
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    os.chmod(outside, 0o644)
    (data / "link").symlink_to(outside)
    os.chmod(data, 0o755)
    os.chmod(data / "falkordb", 0o755)
    os.chmod(data / "falkordb" / "appendonly.aof", 0o644)
    make_private(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "falkordb").stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "falkordb" / "appendonly.aof").stat().st_mode) == 0o600
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644, "a symlink's target is left alone"
