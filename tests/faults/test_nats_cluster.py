"""A 3-node NATS cluster on loopback with R3 streams and consumers: one node is killed in the middle
of an ingest and restarted; nothing is lost and nothing is duplicated (one stored session, one
episode, one EpisodeCreated per published session)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts import SessionCompleted, Subjects
from services.cli.consolidation import wait_until_idle
from services.cli.ingest import publish_sessions
from services.cli.servers.nats_server import find_nats_server_binary
from services.cli.servers.net import free_port, port_answers
from services.common.domain.owner import Owner
from services.common.runtime.broker import connect_nats
from services.common.runtime.root import bootstrap
from services.common.runtime.settings import NatsSettings, TierMemSettings
from tests.faults.sessions import OWNERS, session_records
from tests.support.events import stream_messages, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSIONS = 24


@dataclass
class ClusterNode:
    name: str
    port: int
    cluster_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, token: str, routes: list[str]) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "server_name": self.name,
            "host": "127.0.0.1",
            "port": self.port,
            "authorization": {"token": token},
            "jetstream": {"store_dir": str(self.data_dir / "jetstream")},
            "cluster": {"name": "tiermem-test", "host": "127.0.0.1", "port": self.cluster_port, "routes": routes},
        }
        config_path = self.data_dir / "nats-server.conf"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        with (self.data_dir / "nats-server.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(find_nats_server_binary()), "-c", str(config_path)],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Cluster:
    nodes: list[ClusterNode]
    token: str

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def routes(self) -> list[str]:
        return [f"nats-route://127.0.0.1:{node.cluster_port}" for node in self.nodes]

    def start(self, node: ClusterNode) -> None:
        node.start(self.token, self.routes)
        deadline = time.monotonic() + 30
        while not port_answers(node.port):
            assert time.monotonic() < deadline, f"{node.name} did not start"
            time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    nodes = [ClusterNode(f"n{index}", free_port(), free_port(), tmp_path / f"n{index}") for index in (1, 2, 3)]
    running = Cluster(nodes, secrets.token_urlsafe(16))
    try:
        for node in nodes:
            running.start(node)
        yield running
    finally:
        for node in nodes:
            node.kill()


async def _jetstream_answers(settings: NatsSettings, streams: tuple[str, ...] = ()) -> None:
    """JetStream has a meta leader and each of `streams` a stream leader. A killed node may have led a
    stream nothing wrote to since (the dead-letter stream): its group elects a new leader only on its
    own election timeout, seconds after the pipeline has gone idle, and a read before then times out
    (seen: 7 s after the kill)."""
    client = await connect_nats(settings, "cluster-probe")
    try:
        js = client.jetstream(timeout=2)

        async def _answered() -> bool:
            try:
                await js.account_info()
                for stream in streams:
                    await js.stream_info(stream)
            except Exception:
                return False
            return True

        what = "a JetStream meta leader" + (" and a leader for every stream" if streams else "")
        await wait_for(_answered, what=what, timeout_s=60, interval_s=0.2)
    finally:
        await client.close()


async def test_r3_streams_lose_and_duplicate_nothing_when_a_node_dies_mid_ingest(
    cluster: Cluster, stack_settings: TierMemSettings
) -> None:
    nats = NatsSettings(
        url=cluster.url,
        token=cluster.token,  # type: ignore[arg-type]
        subject_root=f"c{secrets.token_hex(3)}",
        replicas=3,
    )
    settings = stack_settings.model_copy(update={"nats": nats})
    await _jetstream_answers(nats)
    from services.cli.stack import all_services

    events = [SessionCompleted.model_validate(record) for record in session_records(SESSIONS)]
    running = await bootstrap(settings, all_services())
    try:
        first_half = await publish_sessions(settings, events[: SESSIONS // 2])
        victim = cluster.nodes[1]
        victim.kill()  # mid-ingest: the first half is being consolidated, the second not yet published
        second_half = await publish_sessions(settings, events[SESSIONS // 2 :])
        cluster.start(victim)
        await wait_until_idle(settings, all_services(), timeout_s=240)
        episodes = await running.resources.episodes()
        stored = {owner: await episodes.count(Owner(*owner)) for owner in OWNERS}
        subjects = Subjects(nats.subject_root)
        await _jetstream_answers(nats, (subjects.session_stream, subjects.derived_stream, subjects.dead_letter_stream))
        client = await connect_nats(nats, "cluster-check")
        try:
            js = client.jetstream()
            sessions = await stream_messages(js, subjects.session_stream)
            created = await stream_messages(js, subjects.derived_stream, subjects.all_of("episode.created"))
            dead = await stream_messages(js, subjects.dead_letter_stream)
            replicas = (await js.stream_info(subjects.session_stream)).config.num_replicas
        finally:
            await client.close()
    finally:
        await running.stop()
    assert replicas == 3
    assert first_half.published + second_half.published == SESSIONS
    assert len(sessions) == SESSIONS, "every session stored once: none lost, none duplicated"
    created_ids = [json.loads(message.data)["source_event_id"] for message in created]
    assert sorted(created_ids) == sorted(str(event.event_id) for event in events), "one EpisodeCreated per session"
    assert stored == {owner: SESSIONS // len(OWNERS) for owner in OWNERS}, "one episode per session"
    assert dead == []
