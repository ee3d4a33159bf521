"""`tiermem memories list|get|history|forget|correct` and `tiermem sessions add FILE...`: thin
clients of the recall HTTP API's memory-management endpoints (the same auth and rules as every
other client)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli.ingest import load_sessions
from services.cli.metadata_option import MetaOption, metadata_filter
from services.cli.recall import (
    ApiKey,
    ApiTarget,
    BaseUrl,
    DataDir,
    UserId,
    api_client,
    call_api,
    err_console,
    print_api_answer,
    print_json,
    stack_data_dir,
)
from services.common.runtime.settings import load_settings

memories_app = typer.Typer(help="List, read, correct and forget what is remembered (over the recall API).")
sessions_app = typer.Typer(help="Add conversations over the recall API.")

_BATCH_ITEMS = 100
_BATCH_BYTES = 4_000_000  # well under the API's default body limit


@memories_app.command("list")
def list_memories(
    user: UserId,
    kind: Annotated[str, typer.Option(help="episode | fact | all")] = "all",
    limit: Annotated[int, typer.Option(min=1, max=500, help="Items per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    status: Annotated[
        str | None, typer.Option(help="tentative | confirmed | superseded; lists facts only (episodes have no status).")
    ] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow the cursor to the end.")] = False,
    meta: MetaOption = None,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """One page of memories (episodes, then facts, in a stable order), or every page with --all; each
    item shows its session metadata."""
    params: dict[str, Any] = {"user_id": user, "kind": kind, "limit": limit}
    if status:
        params["status"] = status
    if meta:
        params["metadata"] = [f"{key}:{value}" for key, value in metadata_filter(meta).items()]
    items: list[Any] = []
    with api_client(data_dir, api_key, url) as client:
        while True:
            page = call_api(client, "GET", "/v1/memories", params={**params, **({"cursor": cursor} if cursor else {})})
            items += page["items"]
            cursor = page["next_cursor"]
            if not all_pages or cursor is None:
                break
    print_json({"items": items, "next_cursor": cursor})


@memories_app.command("get")
def get_fact(
    fact_id: Annotated[str, typer.Argument()],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """One fact with its status and validity."""
    print_api_answer(ApiTarget(data_dir, api_key, url), "GET", f"/v1/facts/{fact_id}", params={"user_id": user})


@memories_app.command("history")
def history(
    fact_id: Annotated[str, typer.Argument()],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """Every version of a fact, oldest first, with validity and provenance."""
    print_api_answer(ApiTarget(data_dir, api_key, url), "GET", f"/v1/facts/{fact_id}/history", params={"user_id": user})


@memories_app.command("forget")
def forget(
    memory_id: Annotated[str, typer.Argument(help="Fact or episode id.")],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """Forget one fact or episode everywhere (carried out by the pruner; prints where to follow it)."""
    print_api_answer(ApiTarget(data_dir, api_key, url), "DELETE", f"/v1/memories/{memory_id}", params={"user_id": user})


@memories_app.command("correct")
def correct(
    fact_id: Annotated[str, typer.Argument()],
    value: Annotated[str, typer.Argument(help="The corrected value.")],
    text: Annotated[str, typer.Argument(help="The corrected fact as one sentence.")],
    user: UserId,
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """Correct a fact: the new value becomes current and confirmed, the old one is kept as superseded history."""
    body = {"user_id": user, "value": value, "text": text}
    print_api_answer(ApiTarget(data_dir, api_key, url), "POST", f"/v1/facts/{fact_id}/corrections", json=body)


def _batches(records: list[dict[str, Any]], sizes: list[int]) -> list[tuple[list[dict[str, Any]], int]]:
    """The records in batches under the item and byte caps, each with the index of its first record."""
    batches: list[tuple[list[dict[str, Any]], int]] = [([], 0)]
    used = 0
    for index, (record, size) in enumerate(zip(records, sizes, strict=True)):
        if batches[-1][0] and (len(batches[-1][0]) >= _BATCH_ITEMS or used + size > _BATCH_BYTES):
            batches.append(([], index))
            used = 0
        batches[-1][0].append(record)
        used += size
    return [batch for batch in batches if batch[0]]


# Completes records locally only to check them with the ingest limits; never sent: the server's key decides.
_CHECK_TENANT = "local-check"


@sessions_app.command("add")
def add_sessions(
    paths: Annotated[
        list[Path],
        typer.Argument(help=".json (object or list) or .jsonl files of sessions (only user_id and messages needed)."),
    ],
    data_dir: DataDir = None,
    api_key: ApiKey = None,
    url: BaseUrl = None,
) -> None:
    """Validate locally with the ingest limits, then post over HTTP (`POST /v1/sessions:batch`) and print
    each accepted event's id (follow one with `tiermem events status ID -u USER`). A record may be only
    `user_id` and `messages`; the server fills in the rest (the same turns are the same event). Exit code
    1 when any record was rejected (here or by the server)."""
    loaded = load_sessions(paths, load_settings(stack_data_dir(data_dir)).limits, _CHECK_TENANT)
    for rejected in loaded.rejected:
        err_console.print(f"[red]rejected[/] {rejected}")
    records = [form.model_dump(mode="json", exclude_none=True) for form in loaded.forms]
    sizes = [len(event.model_dump_json()) for _path, _line, event in loaded.valid]
    where = [f"{path}:{line}" for path, line, _event in loaded.valid]
    accepted = duplicates = refused = 0
    events: list[dict[str, Any]] = []
    with api_client(data_dir, api_key, url) as client:
        for batch, offset in _batches(records, sizes):
            result = call_api(client, "POST", "/v1/sessions:batch", json={"sessions": batch})
            accepted += result["accepted"]
            duplicates += result["duplicates"]
            refused += result["rejected"]
            for item in result["items"]:
                record = batch[item["index"]]
                if item["status"] == "rejected":
                    err_console.print(
                        f"[red]rejected by the server[/] {where[offset + item['index']]}: {item['error']}"
                    )
                    continue
                events.append(
                    {"event_id": item["event_id"], "user_id": record["user_id"], "duplicate": item["duplicate"]}
                )
    print_json(
        {"accepted": accepted, "duplicates": duplicates, "rejected": refused + len(loaded.rejected), "events": events}
    )
    if refused or loaded.rejected:
        raise typer.Exit(1)
