"""Following events through the running recall API: `tiermem events status ID -u USER`, and the wait of
`tiermem ingest --wait` (a progress bar until every event is consolidated, processed or dead-lettered)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from services.cli.recall import ApiKey, ApiTarget, BaseUrl, DataDir, UserId, api_client, print_api_answer

events_app = typer.Typer(help="Follow accepted events (sessions, erasures) over the recall API.")

# Where a session stops: nothing more will happen to it.
SETTLED = ("consolidated", "processed", "dead_lettered")
_PAUSE_S = 0.5


@events_app.command("status")
def status(
    event_id: Annotated[str, typer.Argument(help="The event id a write printed (sessions add, ingest, forget).")],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """Where one event is: accepted, consolidated (with its episode), processed, dead-lettered (with the
    reason), or an erasure's progress."""
    print_api_answer(ApiTarget(data_dir, api_key, url), "GET", f"/v1/events/{event_id}", params={"user_id": user})


@dataclass
class WaitOutcome:
    """What became of the followed events: how many reached each state, and each dead letter's reason."""

    states: Counter[str] = field(default_factory=Counter)
    dead: list[tuple[str, str]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


class EventNotVisible(LookupError):
    """The API key cannot see the event (another tenant's key, or the wrong stack)."""


def _state_of(client: httpx.Client, event_id: str, user_id: str) -> dict[str, Any]:
    try:
        response = client.get(f"/v1/events/{event_id}", params={"user_id": user_id})
    except httpx.HTTPError as exc:
        raise ConnectionError(f"cannot reach the recall API at {client.base_url}: {exc}") from exc
    if response.status_code == 404:
        raise EventNotVisible(
            f"event {event_id} of user {user_id} is not visible with this API key: was it ingested for the "
            "key's tenant (--tenant) into this stack?"
        )
    if response.status_code >= 400:
        raise ConnectionError(f"the recall API answered {response.status_code}: {response.text}")
    body: dict[str, Any] = response.json()
    return body


def _label(outcome: WaitOutcome) -> str:
    return ", ".join(f"{state.replace('_', '-')} {outcome.states[state]}" for state in SETTLED)


def follow_events(
    client: httpx.Client, events: Sequence[tuple[str, str]], console: Console, timeout_s: float
) -> WaitOutcome:
    """Poll every (event id, user id) until each is settled or `timeout_s` passes, with a progress bar
    on `console`. Raises EventNotVisible or ConnectionError when the API cannot answer for an event."""
    outcome = WaitOutcome()
    waiting = dict(events)
    deadline = time.monotonic() + timeout_s
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"consolidating ({_label(outcome)})", total=len(waiting))
        while waiting and time.monotonic() < deadline:
            for event_id, user_id in list(waiting.items()):
                found = _state_of(client, event_id, user_id)
                if found["state"] not in SETTLED:
                    continue
                del waiting[event_id]
                outcome.states[found["state"]] += 1
                if found["state"] == "dead_lettered":
                    outcome.dead.append((event_id, found.get("reason") or "no reason recorded"))
                progress.update(task, advance=1, description=f"consolidating ({_label(outcome)})")
            if waiting:
                time.sleep(_PAUSE_S)
    outcome.pending = list(waiting)
    return outcome


def wait_for_ingested(
    target: ApiTarget, events: Sequence[tuple[str, str]], console: Console, timeout_s: float
) -> WaitOutcome:
    """`follow_events` through the API client of `target`; an unanswerable event ends the command (exit 2)."""
    with api_client(target.data_dir, target.api_key, target.url) as client:
        try:
            return follow_events(client, events, console, timeout_s)
        except (EventNotVisible, ConnectionError) as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc


def report_wait(outcome: WaitOutcome, console: Console) -> int:
    """Print what became of the events; the exit code: 1 on any dead letter or an unsettled event."""
    for event_id, reason in outcome.dead:
        console.print(f"[red]dead-lettered[/] {event_id}: {reason}", highlight=False, soft_wrap=True)
    for event_id in outcome.pending:
        console.print(f"[yellow]still pending[/] {event_id}", highlight=False, soft_wrap=True)
    console.print(_label(outcome) + (f", pending {len(outcome.pending)}" if outcome.pending else ""))
    return 1 if outcome.dead or outcome.pending else 0
