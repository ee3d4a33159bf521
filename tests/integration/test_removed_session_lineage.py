"""A writer consolidating a raw session that a fact or episode erasure removed from the session stream
drops its work (issue 48, item 3: a session accepted before the erasure's 202 is erased even when it is
consolidated while or after the erasure runs), against a real nats-server. A session that aged out of
the stream was not erased, and its work goes on."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NatsClient

from contracts import Subjects
from services.common.domain.owner import Owner
from services.common.runtime.settings import NatsSettings
from services.common.stores.tombstones import TombstoneStore

pytestmark = pytest.mark.integration

DORA = Owner("acme", "dora")


async def test_work_from_a_removed_session_is_dropped_and_from_an_aged_out_one_goes_on(
    nats_settings: NatsSettings, nats_client: NatsClient
) -> None:
    subjects = Subjects(nats_settings.subject_root)
    js = nats_client.jetstream()
    stream = subjects.session_stream
    await js.add_stream(name=stream, subjects=[subjects.all_session_completed()])
    subject = subjects.session_completed(DORA.tenant_id, DORA.user_id)
    first, removed, kept = [(await js.publish(subject, b"{}", stream=stream)).seq for _ in range(3)]
    store = TombstoneStore(js, subjects)

    async with store.guard(DORA, "episodic-summarizer", removed, from_session=True) as guard:
        assert not guard.erased
        await js.delete_msg(stream, removed)  # a fact erasure replaces it while the summary is written
        assert not await guard.still_allowed()
        assert guard.erased
    async with store.guard(DORA, "episodic-summarizer", kept, from_session=True) as guard:
        assert await guard.still_allowed()
    # Work that does not come from one raw session (a compression of several) is not judged by it.
    async with store.guard(DORA, "compression", removed) as guard:
        assert await guard.still_allowed()

    await js.purge_stream(stream, seq=kept)  # everything below `kept` ages out of the stream
    async with store.guard(DORA, "semantic-extractor", first, from_session=True) as guard:
        assert await guard.still_allowed(), "an aged-out session was not erased"
    assert await store.busy_writers(DORA) == []
