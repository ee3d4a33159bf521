"""An empty L0 answer says why where a person looks: the browser's L0 preview (Chromium) and
`tiermem recall auto`, against a real `tiermem up` with sessions ingested, and in the same words as
the API's `skipped_reason`."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import LOCAL_KEY, MemoryStack, open_context
from tests.integration.test_stack import TIERMEM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UNRELATED = "What is the boiling point of tungsten in kelvin?"
FLOOR_OR_CUT = re.compile(r"^(nothing scored above the floor \(top \d\.\d\d < \d\.\d\d\)|every candidate cut: .+)$")


def _preview(page: Page, user: str, message: str) -> str:
    """The preview's reason for an empty answer (the page must show no section)."""
    page.goto(f"/ui/u/{user}")
    page.get_by_label("Current message").fill(message)
    page.get_by_role("button", name="Preview L0").click()
    expect(page.locator("#l0-empty")).to_be_visible()
    expect(page.locator("#l0-section")).to_have_count(0)
    return page.locator("#l0-skipped").inner_text()


def _api_reason(stack: MemoryStack, user: str, message: str) -> str:
    with stack.api(LOCAL_KEY) as client:
        response = client.post("/v1/recall/auto", json={"user_id": user, "message": message})
    assert response.status_code == 200, response.text
    assert response.json()["injected"] == 0
    reason: str = response.json()["skipped_reason"]
    return reason


def test_the_l0_preview_says_why_nothing_is_injected(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    assert _preview(page, "minji", "ok") == "trivial message (not searched)"
    assert _preview(page, "nobody", "Where do I live now?") == "no memory for this user"
    unrelated = _preview(page, "minji", UNRELATED)
    assert FLOOR_OR_CUT.match(unrelated), unrelated
    assert unrelated == _api_reason(memory_stack, "minji", UNRELATED), "the preview says what the API says"
    expect(page.locator("#l0-empty")).to_contain_text(f"L0 injects nothing for this message: {unrelated}.")
    context.close()


def test_tiermem_recall_auto_prints_the_reason_in_words(memory_stack: MemoryStack) -> None:
    env = {**os.environ, "TIERMEM_DATA_DIR": str(memory_stack.data_dir)}

    def recall_auto(user: str, message: str) -> str:
        command = [*TIERMEM, "recall", "auto", message, "--user", user, "--api-key", LOCAL_KEY]
        done = subprocess.run([*command, "--url", memory_stack.base_url], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    nobody = recall_auto("nobody", "Where do I live now?")
    assert nobody.startswith("Nothing injected: no memory for this user.\n"), nobody
    assert "None" not in nobody
    unrelated = recall_auto("minji", UNRELATED)
    assert unrelated.startswith(f"Nothing injected: {_api_reason(memory_stack, 'minji', UNRELATED)}."), unrelated
    assert "None" not in unrelated
