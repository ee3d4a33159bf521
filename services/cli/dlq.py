"""`tiermem dlq list|replay`: what ran out of retries, and bringing it back once the cause is fixed.

A replay republishes each dead letter's original payload on its original subject and stream, with
a `Nats-Msg-Id` derived from the dead letter (so a replay that is interrupted and run again is
dropped by the stream's duplicate window), and a header naming the consumer that gave up on it
(so the other consumers of that subject do not process it a second time). Once the stream has
stored the republished message, the dead letter is deleted: a second replay finds nothing to do.
If the message fails again, the consumer writes a new dead letter (it has a new stream sequence)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from contracts import DeadLetterRecord, Subjects
from contracts.events import is_subject_token
from services.common.domain.ids import MessageId, dedup_headers, owner_message_id, unowned_message_id
from services.common.domain.owner import Owner
from services.common.runtime.broker import BrokerUnavailable, short_lived_nats
from services.common.runtime.durable_consumer import REPLAY_FOR_HEADER
from services.common.runtime.settings import TierMemSettings, load_settings

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

dlq_app = typer.Typer(help="Dead letters: list them, replay them once the cause is fixed.", no_args_is_help=True)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a command applies to; None matches everything."""

    consumer: str | None = None
    reason: str | None = None
    kind: str | None = None

    def matches(self, record: DeadLetterRecord) -> bool:
        return (
            (self.consumer is None or record.consumer == self.consumer)
            and (self.reason is None or self.reason.lower() in record.reason.lower())
            and (self.kind is None or record.kind == self.kind)
        )


@dataclass(frozen=True)
class StoredDeadLetter:
    """A dead-letter record and where it sits in the dead-letter stream."""

    sequence: int
    record: DeadLetterRecord


@dataclass(frozen=True)
class ReplayOutcome:
    letter: StoredDeadLetter
    republished_sequence: int
    duplicate: bool


def replay_msg_id(record: DeadLetterRecord) -> MessageId:
    """Deterministic: the same dead letter always republishes under the same id (scoped by its owner
    when the letter names one, like every message id)."""
    if record.tenant_id and record.user_id and is_subject_token(record.tenant_id) and is_subject_token(record.user_id):
        return owner_message_id(Owner(record.tenant_id, record.user_id), "dlq-replay", record.event_id)
    return unowned_message_id("dlq-replay", record.event_id)


async def read_dead_letters(
    js: JetStreamContext, subjects: Subjects, selection: DeadLetterFilter | None = None
) -> list[StoredDeadLetter]:
    """Every dead letter currently in the stream that `selection` matches, oldest first."""
    selection = selection or DeadLetterFilter()
    info = await js.stream_info(subjects.dead_letter_stream)
    found: list[StoredDeadLetter] = []
    if info.state.messages == 0:
        return found
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            stored = await js.get_msg(subjects.dead_letter_stream, sequence)
        except NotFoundError:
            continue  # deleted (replayed) or expired
        try:
            record = DeadLetterRecord.model_validate_json(stored.data or b"")
        except ValidationError:
            continue  # not a record this version can read: left alone
        if selection.matches(record):
            found.append(StoredDeadLetter(sequence=sequence, record=record))
    return found


async def replay_dead_letters(
    js: JetStreamContext, subjects: Subjects, letters: list[StoredDeadLetter]
) -> list[ReplayOutcome]:
    """Republish each letter, then delete it from the dead-letter stream (in that order: a crash in
    between leaves the letter, and the next replay is dropped as a duplicate but still deletes it)."""
    outcomes: list[ReplayOutcome] = []
    for letter in letters:
        record = letter.record
        ack = await js.publish(
            record.original_subject,
            record.payload.encode("utf-8"),
            stream=record.original_stream,
            headers={**dedup_headers(replay_msg_id(record)), REPLAY_FOR_HEADER: record.consumer},
            timeout=10.0,
        )
        with contextlib.suppress(NotFoundError):  # another replay got there first
            await js.delete_msg(subjects.dead_letter_stream, letter.sequence)
        outcomes.append(ReplayOutcome(letter=letter, republished_sequence=ack.seq, duplicate=bool(ack.duplicate)))
    return outcomes


async def _list(settings: TierMemSettings, selection: DeadLetterFilter) -> list[StoredDeadLetter]:
    async with short_lived_nats(settings.nats, "tiermem-cli-dlq") as client:
        return await read_dead_letters(client.jetstream(), Subjects(settings.nats.subject_root), selection)


async def _replay(settings: TierMemSettings, selection: DeadLetterFilter, dry_run: bool) -> list[ReplayOutcome]:
    async with short_lived_nats(settings.nats, "tiermem-cli-dlq") as client:
        js = client.jetstream()
        subjects = Subjects(settings.nats.subject_root)
        letters = await read_dead_letters(js, subjects, selection)
        if dry_run:
            return [ReplayOutcome(letter=letter, republished_sequence=0, duplicate=False) for letter in letters]
        return await replay_dead_letters(js, subjects, letters)


DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir of the embedded stack (env TIERMEM_DATA_DIR, default ./.tiermem)."),
]
ConsumerOption = Annotated[str | None, typer.Option("--consumer", help="Only this durable consumer's letters.")]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="Only letters whose reason contains this text.")]
KindOption = Annotated[str | None, typer.Option("--kind", help="Only 'poison' or only 'exhausted' letters.")]


def _selection(consumer: str | None, reason: str | None, kind: str | None) -> DeadLetterFilter:
    if kind is not None and kind not in ("poison", "exhausted"):
        err_console.print(f"[red]error:[/] --kind must be 'poison' or 'exhausted', not {kind!r}")
        raise typer.Exit(2)
    return DeadLetterFilter(consumer=consumer, reason=reason, kind=kind)


def _render(letters: list[StoredDeadLetter], title: str) -> Table:
    table = Table(title=title)
    for column in ("seq", "consumer", "kind", "tenant/user", "deliveries", "failed at", "reason"):
        table.add_column(column)
    for letter in letters:
        record = letter.record
        table.add_row(
            str(letter.sequence),
            record.consumer,
            record.kind,
            f"{record.tenant_id or '-'}/{record.user_id or '-'}",
            str(record.deliveries),
            record.failed_at.isoformat(timespec="seconds"),
            record.reason[:120],
        )
    return table


@dlq_app.command("list")
def list_command(
    data_dir: DataDirOption = None,
    consumer: ConsumerOption = None,
    reason: ReasonOption = None,
    kind: KindOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON record per line.")] = False,
) -> None:
    """Dead letters in the stream (poison messages and messages that ran out of retries)."""
    selection = _selection(consumer, reason, kind)
    try:
        letters = asyncio.run(_list(load_settings(data_dir), selection))
    except (BrokerUnavailable, TimeoutError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        for letter in letters:
            print(json.dumps({"sequence": letter.sequence, **letter.record.model_dump(mode="json")}))
        return
    console.print(_render(letters, f"{len(letters)} dead letters"))


@dlq_app.command("replay")
def replay_command(
    data_dir: DataDirOption = None,
    consumer: ConsumerOption = None,
    reason: ReasonOption = None,
    kind: KindOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be replayed; change nothing.")] = False,
) -> None:
    """Republish dead letters to the consumer that gave up on them, then remove them from the
    dead-letter stream. Run it once the cause is fixed (a store back up, a bug fixed)."""
    selection = _selection(consumer, reason, kind)
    try:
        outcomes = asyncio.run(_replay(load_settings(data_dir), selection, dry_run))
    except (BrokerUnavailable, TimeoutError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if dry_run:
        console.print(_render([outcome.letter for outcome in outcomes], f"would replay {len(outcomes)}"))
        return
    duplicates = sum(outcome.duplicate for outcome in outcomes)
    console.print(f"replayed {len(outcomes) - duplicates}, already replayed before {duplicates}")
