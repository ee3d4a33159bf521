"""The commands that run their own embedded stack (`tiermem eval locomo`, `tiermem bench ingest`), their
nats-server killed while the sessions are being consolidated (an operator's kill, the OOM killer, a full
disk): the command ends within a minute with one error line and exit 1. Before, the consumers' failed
naks were logged by FastStream as ERROR with a three-part traceback each, and the evaluation ended in a
traceback of its own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.faults.embedded import children
from tests.support.events import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

TIERMEM = [sys.executable, "-m", "services.cli"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
TOPICS = ["a grey cat", "the Berlin marathon", "cello lessons", "a trip to Jeju", "a new bakery", "the chess club"]


def _conversation(sessions: int) -> dict[str, Any]:
    """Enough sessions that consolidation is still running when the test kills the broker."""
    conversation: dict[str, Any] = {"speaker_a": "Mina", "speaker_b": "Joon"}
    for number in range(1, sessions + 1):
        topic = TOPICS[number % len(TOPICS)]
        conversation[f"session_{number}_date_time"] = f"10:00 am on {number} May, 2023"
        conversation[f"session_{number}"] = [
            {"speaker": speaker, "dia_id": f"D{number}:{turn}", "text": text}
            for turn, (speaker, text) in enumerate(
                [
                    ("Mina", f"Session {number}: I spent the weekend on {topic} with my sister."),
                    ("Joon", f"How did {topic} go this time?"),
                    ("Mina", f"Better than last time, I want to keep going with {topic} every month."),
                ]
            )
        ]
    question = {"question": "What did Mina do with her sister?", "answer": "a grey cat", "evidence": ["D1:0"]}
    return {"sample_id": "loss-conv", "conversation": conversation, "qa": [{**question, "category": 1}]}


def _nats_server_pid(command_pid: int) -> int | None:
    """The nats-server the command started for its stack (a child of the command's process)."""
    for pid in children(command_pid):
        try:
            if b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


async def _wait_for_consolidation_to_start(work_dir: Path, command_pid: int) -> None:
    """Until the first episode has been published on the derived stream: the consumers are busy."""
    config_path = work_dir / "nats" / "nats-server.conf"

    async def _configured() -> bool:
        return config_path.is_file() and _nats_server_pid(command_pid) is not None

    await wait_for(_configured, what="the command's nats-server", timeout_s=120, interval_s=0.2)
    config = json.loads(config_path.read_text(encoding="utf-8"))
    url = f"nats://127.0.0.1:{config['port']}"

    async def _consolidating() -> bool:
        try:
            client = await nats.connect(url, token=config["authorization"]["token"], allow_reconnect=False)
        except Exception:
            return False
        try:
            info = await client.jetstream().stream_info("MEMORY_EVENTS")
        except Exception:
            return False
        finally:
            await client.close()
        return info.state.messages > 0

    await wait_for(_consolidating, what="the first derived event", timeout_s=120, interval_s=0.2)


@pytest.mark.parametrize(
    ("command", "stopped"),
    [
        (["eval", "locomo", "{conversation}", "--work-dir", "{work}"], "error: the evaluation stopped: "),
        (["bench", "ingest", "--locomo", "{conversation}", "--work-dir", "{work}"], "error: the bench stopped: "),
    ],
    ids=["eval-locomo", "bench-ingest"],
)
async def test_the_stacks_nats_server_killed_mid_run_ends_the_command_with_one_error_line(
    tmp_path: Path, command: list[str], stopped: str
) -> None:
    conversation, work = tmp_path / "conv.json", tmp_path / "work"
    conversation.write_text(json.dumps([_conversation(12)]), encoding="utf-8")
    arguments = [argument.format(conversation=conversation, work=work) for argument in command]
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *TIERMEM, *arguments, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        await _wait_for_consolidation_to_start(work, process.pid)
        assert process.returncode is None, "the command finished before the broker was killed: give it more sessions"
        pid = _nats_server_pid(process.pid)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(process.wait(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = stderr_path.read_text(errors="replace")
    assert process.returncode == 1, output[-3000:]
    assert stopped in output and "cannot reach NATS" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert " ERROR " not in output, output[-3000:]
