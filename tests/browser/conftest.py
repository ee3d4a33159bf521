"""A real `tiermem up` with two tenants' keys and sessions ingested, and Debian's Chromium driven by
Playwright (never a downloaded browser). Screenshots are written only with TIERMEM_SCREENSHOTS=1."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright

from services.cli.servers.net import free_port
from tests.integration.test_stack import EXAMPLES, TIERMEM, Stack, _children, _ingest

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LOCAL_KEY = "Kq7uV2xP9sLm4Tz8RbN3wYc6-local"
OTHER_KEY = "Zp4Lx8Qw2Vn7Km5Rt9Hs3Jd6-other"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

expect.set_options(timeout=30_000)


@dataclass
class MemoryStack:
    base_url: str
    data_dir: Path
    log_path: Path
    # Ids learned while seeding, for the isolation checks (what must never show up where).
    episode_ids: dict[str, list[str]] = field(default_factory=dict)
    # Every URL the browser requested (memory text must never be in one).
    requested_urls: list[str] = field(default_factory=list)

    def api(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _session(event_id: str, tenant: str, user: str, session_id: str, lines: list[str]) -> dict[str, object]:
    return {
        "event_id": event_id,
        "tenant_id": tenant,
        "user_id": user,
        "agent_id": "assistant",
        "session_id": session_id,
        "channel": "private",
        "scope": "personal",
        "started_at": "2026-11-25T10:00:00+09:00",
        "ended_at": "2026-11-25T10:20:00+09:00",
        "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(lines)],
    }


JUN_SESSION = _session(
    "6a1b2c3d-0000-4000-8000-00000000a001",
    "local",
    "jun",
    "jun-cello",
    [
        "I play the cello in the Incheon community orchestra every Saturday morning.",
        "Nice: cello with the Incheon orchestra on Saturdays. Should I keep Saturday mornings free?",
        "Yes, never book anything on Saturday mornings.",
    ],
)
OTHER_MINJI_SESSION = _session(
    "6a1b2c3d-0000-4000-8000-00000000b001",
    "other",
    "minji",
    "other-kestrel",
    [
        "Our warehouse robot project Kestrel is written in Rust and ships in March.",
        "Noted: Kestrel, the warehouse robot, in Rust, shipping in March.",
        "Also remember that the Kestrel demo is in Daejeon.",
    ],
)


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Polls a condition of the real system (never a fixed sleep standing in for one)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _memories(client: httpx.Client, user: str, kind: str) -> list[dict[str, object]]:
    response = client.get("/v1/memories", params={"user_id": user, "kind": kind, "limit": 200})
    response.raise_for_status()
    items: list[dict[str, object]] = response.json()["items"]
    return items


def _seed(stack: MemoryStack) -> None:
    result = _ingest(stack.data_dir, EXAMPLES / "sessions-en.json", EXAMPLES / "sessions-ko.jsonl")
    assert result.returncode == 0, result.stdout + result.stderr
    with stack.api(LOCAL_KEY) as local, stack.api(OTHER_KEY) as other:
        assert local.post("/v1/sessions", json=JUN_SESSION).status_code == 202
        assert other.post("/v1/sessions", json=OTHER_MINJI_SESSION).status_code == 202
        # Four episodes and the facts the extractor finds in them (the Korean move supersedes Seoul).
        _wait_until(lambda: len(_memories(local, "minji", "episode")) == 4, "minji's episodes")
        _wait_until(
            lambda: (
                {"The user is vegetarian.", "사용자는 부산에 살고 있다."}
                <= {str(m["text"]) for m in _memories(local, "minji", "fact")}
            ),
            "minji's facts",
        )
        _wait_until(lambda: len(_memories(local, "jun", "episode")) == 1, "jun's episode")
        _wait_until(lambda: len(_memories(other, "minji", "episode")) == 1, "the other tenant's episode")
        stack.episode_ids["local/minji"] = [str(m["id"]) for m in _memories(local, "minji", "episode")]
        stack.episode_ids["local/jun"] = [str(m["id"]) for m in _memories(local, "jun", "episode")]
        stack.episode_ids["other/minji"] = [str(m["id"]) for m in _memories(other, "minji", "episode")]


class LoggedStack(Stack):
    """`tiermem up` with its output in a file: read afterwards (no memory text may be in it), and
    never a pipe nobody drains."""

    def __init__(self, data_dir: Path, http_port: int, log_path: Path) -> None:
        super().__init__(data_dir, http_port)
        self.log_path = log_path

    def start(self, timeout_s: float = 120.0) -> None:
        env = {**os.environ, "TIERMEM_DATA_DIR": str(self.data_dir)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*TIERMEM, "up", "--http-port", str(self.http_port)], env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1).status_code == 200:
                    self.child_pids = _children(self.process.pid)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"tiermem up did not become ready:\n{self.log_path.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def memory_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryStack]:
    base = tmp_path_factory.mktemp("ui")
    data_dir = base / "data"
    running = LoggedStack(data_dir, free_port(), base / "up.log")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIERMEM_API_KEYS", f'{{"{LOCAL_KEY}": "local", "{OTHER_KEY}": "other"}}')
        env.setenv("TIERMEM_OPERATOR_TENANTS", '["local"]')  # the Pipeline page is for operators
        try:
            running.start()
            stack = MemoryStack(f"http://127.0.0.1:{running.http_port}", data_dir, running.log_path)
            _seed(stack)
            yield stack
        finally:
            running.kill()


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    assert CHROMIUM.exists(), "install Debian's chromium (scripts/test does it when it is missing)"
    launched = playwright_driver.chromium.launch(executable_path=str(CHROMIUM))
    try:
        yield launched
    finally:
        launched.close()


def open_context(browser: Browser, stack: MemoryStack, key: str, **options: object) -> BrowserContext:
    """A fresh browser profile logged in with `key` through the login form."""
    context = browser.new_context(base_url=stack.base_url, viewport=options.pop("viewport", DESKTOP), **options)  # type: ignore[arg-type]
    context.on("request", lambda request: stack.requested_urls.append(request.url))
    page = context.new_page()
    page.goto("/ui")
    expect(page).to_have_url(f"{stack.base_url}/ui/login")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Users of")
    page.close()
    return context


def screenshot(page: Page, name: str) -> None:
    """Written only when TIERMEM_SCREENSHOTS=1 (README images are refreshed on purpose, not by CI)."""
    if os.environ.get("TIERMEM_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
