"""`tiermem provision` (the Kubernetes provisioning Job's command) creates the streams, every
service's durable consumer, the vector collections and the graph schema; a second run changes
nothing and succeeds; an unreachable broker is one clear error line and exit 1, in bounded time."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.cli.servers.net import free_port
from services.cli.stack import all_services
from services.common.runtime.provisioning import consumer_config, exhausted_watch_durable
from services.common.runtime.settings import NatsSettings
from services.common.stores.open_sessions import OpenSessionStore
from services.common.stores.vector.port import EPISODES, FACTS, PASSAGES
from tests.fixtures.falkordb import FalkorDBGraph

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _tiermem() -> str:
    program = shutil.which("tiermem", path=str(Path(sys.executable).parent))
    assert program is not None
    return program


async def _run(env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        _tiermem(), "provision", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


def _env(nats_url: str, token: str, subject_root: str, graph: FalkorDBGraph, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TIERMEM_DATA_DIR": str(tmp_path / "no-stack-here"),
        "TIERMEM_NATS__URL": nats_url,
        "TIERMEM_NATS__TOKEN": token,
        "TIERMEM_NATS__SUBJECT_ROOT": subject_root,
        "TIERMEM_NATS__CONNECT_TIMEOUT_S": "2",
        "TIERMEM_VECTOR__PATH": str(tmp_path / "edge"),
        "TIERMEM_GRAPH__HOST": graph.host,
        "TIERMEM_GRAPH__PORT": str(graph.port),
        "TIERMEM_GRAPH__PASSWORD": graph.password,
        "TIERMEM_GRAPH__GRAPH_NAME": graph.graph_name,
    }


async def test_provision_creates_everything_and_is_idempotent(
    nats_settings: NatsSettings, nats_client: NatsClient, falkordb_graph: FalkorDBGraph, tmp_path: Path
) -> None:
    assert nats_settings.token is not None
    token = nats_settings.token.get_secret_value()
    env = _env(nats_settings.url, token, nats_settings.subject_root, falkordb_graph, tmp_path)
    code, out, err = await _run(env)
    assert code == 0, out + err
    assert "provisioned" in out

    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    expected = [spec for definition in all_services() for spec in definition.consumers(subjects)]
    assert len(expected) == len(all_services())
    settings = NatsSettings(subject_root=nats_settings.subject_root)
    before = {}
    for spec in expected:
        info = await js.consumer_info(spec.stream, spec.durable)
        assert info.config.filter_subjects == consumer_config(spec, settings).filter_subjects
        assert info.config.max_deliver == settings.max_deliver
        before[spec.durable] = info.config
        watcher = exhausted_watch_durable(spec)
        assert (await js.consumer_info(subjects.advisory_stream, watcher)).config.durable_name == watcher
        assert f"{subjects.advisory_stream}/{watcher}" in out, "the report names the advisories' consumers too"
    for stream in (
        subjects.session_stream,
        subjects.derived_stream,
        subjects.dead_letter_stream,
        subjects.advisory_stream,
    ):
        await js.stream_info(stream)
        assert stream in out
    await js.key_value(OpenSessionStore(js, subjects).bucket)  # per-turn sessions' bucket: raises when absent

    for collection in (EPISODES, PASSAGES, FACTS):
        assert any((tmp_path / "edge" / collection).iterdir()), f"collection {collection} was created"

    code, out, err = await _run(env)
    assert code == 0, out + err
    for spec in expected:
        assert (await js.consumer_info(spec.stream, spec.durable)).config == before[spec.durable]


async def test_provision_without_a_broker_is_one_clear_error(falkordb_graph: FalkorDBGraph, tmp_path: Path) -> None:
    env = _env(f"nats://127.0.0.1:{free_port()}", "unused", "tnobroker", falkordb_graph, tmp_path)
    code, _, err = await _run(env)
    assert code == 1
    assert "provisioning failed: cannot reach NATS at nats://127.0.0.1:" in err and "Traceback" not in err, err
