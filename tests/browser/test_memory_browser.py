"""The memory browser in headless Chromium against a real `tiermem up`: isolation between users and
tenants, then the click-through (search, episode, correct, forget, erase until the audit is zero).
The tests of this module share one stack and run in file order: the last one erases the user."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    LOCAL_KEY,
    OTHER_KEY,
    PHONE,
    MemoryStack,
    open_context,
    screenshot,
)
from tests.integration.test_stack import TIERMEM

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _search(page: Page, query: str, kind: str = "all") -> None:
    """From the user's page (every page of results has the same form)."""
    form = page.get_by_role("search")
    form.get_by_label("Query").fill(query)
    form.get_by_label("Kind").select_option(kind)
    form.get_by_role("button", name="Search").click()
    expect(page.locator("#results-h")).to_be_visible()


def _preview_l0(page: Page, message: str) -> None:
    """From minji's page (the L0 form lives there and on its own result page)."""
    if "/l0" not in page.url:
        page.goto("/ui/u/minji")
    page.get_by_label("Current message").fill(message)
    page.get_by_role("button", name="Preview L0").click()
    expect(page.get_by_role("heading", name="What L0 would inject")).to_be_visible()


def test_login_session_and_csrf_are_enforced(memory_stack: MemoryStack) -> None:
    with httpx.Client(base_url=memory_stack.base_url, timeout=30) as client:
        assert client.get("/ui/u/minji").status_code == 303, "no session: to the login form"
        refused = client.post("/ui/login", data={"api_key": "not-a-key-not-a-key"})
        assert refused.status_code == 401 and "not valid" in refused.text
        assert client.post("/ui/u/minji/search", data={"query": "x"}).status_code == 401
        logged_in = client.post("/ui/login", data={"api_key": LOCAL_KEY})
        assert logged_in.status_code == 303
        cookie = logged_in.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and LOCAL_KEY.lower() not in cookie
        no_csrf = client.post("/ui/u/minji/search", data={"query": "DGIA"})
        assert no_csrf.status_code == 403, "a form without the session's CSRF token is refused"
        page = client.get("/ui/u/minji")
        assert page.status_code == 200
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        empty = client.post("/ui/u/minji/search", data={"query": "", "csrf": csrf.group(1)})
        assert empty.status_code == 422 and "query" in empty.text, "a bad form is a clear error page"
        huge = client.post(
            "/ui/login",
            content=b"api_key=" + b"x" * 2_000_000,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert huge.status_code == 413, "refused before the body is read"
        assert "default-src 'self'" in page.headers["content-security-policy"]
        signed = client.cookies["tiermem_ui"]
        tampered = signed[:-2] + ("11" if signed.endswith("00") else "00")  # always a different cookie
        client.cookies.set("tiermem_ui", tampered, path="/ui")
        assert client.get("/ui/u/minji").status_code == 303, "a tampered session cookie is no session"


def test_other_users_and_tenants_never_appear(browser: Browser, memory_stack: MemoryStack) -> None:
    local = open_context(browser, memory_stack, LOCAL_KEY)
    page = local.new_page()
    page.goto("/ui")
    expect(page.get_by_role("link", name="minji", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="jun", exact=True)).to_be_visible()
    page.goto("/ui/u/minji")
    expect(page.locator("#memory-list")).to_contain_text("DGIA")
    expect(page.locator("#memory-list")).not_to_contain_text("cello")
    expect(page.locator("#memory-list")).not_to_contain_text("Kestrel")
    _search(page, "cello orchestra Incheon Saturday")
    expect(page.locator("#search-empty")).to_be_visible()
    _search(page, "Kestrel warehouse robot Rust")
    expect(page.locator("#search-empty")).to_be_visible()
    _preview_l0(page, "Any plans with the cello orchestra in Incheon or the Kestrel robot?")
    expect(page.locator("main")).not_to_contain_text("Incheon community orchestra")
    # Another user's id under this user's path is not found, exactly like a made-up id.
    page.goto(f"/ui/u/minji/episodes/{memory_stack.episode_ids['local/jun'][0]}")
    expect(page.get_by_role("alert")).to_have_text("memory not found")
    local.close()

    other = open_context(browser, memory_stack, OTHER_KEY)
    page = other.new_page()
    page.goto("/ui")
    expect(page.locator("ul.users")).to_have_text("minji")
    page.goto("/ui/u/minji")
    expect(page.locator("#memory-list")).to_contain_text("Kestrel")
    expect(page.locator("#memory-list")).not_to_contain_text("DGIA")
    _search(page, "DGIA billing service in Go")
    expect(page.locator('section[aria-labelledby="results-h"]')).not_to_contain_text("DGIA")
    page.goto(f"/ui/u/minji/episodes/{memory_stack.episode_ids['local/minji'][0]}")
    expect(page.get_by_role("alert")).to_have_text("memory not found")
    other.close()


def _stats_json(stack: MemoryStack) -> dict[str, Any]:
    """What `tiermem stats --json` reports for the running stack."""
    env = {**os.environ, "TIERMEM_DATA_DIR": str(stack.data_dir)}
    done = subprocess.run([*TIERMEM, "stats", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stats: dict[str, Any] = json.loads(done.stdout)
    return stats


def test_user_page_counts_and_lists_newest_first(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    page.goto("/ui/u/minji")
    with memory_stack.api(LOCAL_KEY) as api:
        episodes = api.get("/v1/memories", params={"user_id": "minji", "kind": "episode", "limit": 500}).json()
        facts = api.get("/v1/memories", params={"user_id": "minji", "kind": "fact", "limit": 500}).json()
    statuses = Counter(str(f["status"]) for f in facts["items"])
    expect(page.locator("#count-episodes")).to_have_text(str(len(episodes["items"])))
    expect(page.locator("#count-facts")).to_have_text(str(len(facts["items"])))
    for name in ("tentative", "confirmed", "superseded"):
        expect(page.locator(f"#count-{name}")).to_have_text(str(statuses[name]))
    assert int(page.locator("#count-entities").inner_text()) > 0, "the offline extraction found entities"
    expect(page.locator("#list-order")).to_contain_text("Newest first")
    said = [
        datetime.fromisoformat(value)
        for value in page.locator("#memory-list time").evaluate_all("els => els.map(e => e.dateTime)")
    ]
    assert len(said) == len(episodes["items"]) + len(facts["items"])
    assert said == sorted(said, reverse=True), "newest first"
    assert len(set(said)) > 1, "the seeded memories were said at different times"
    screenshot(page, "user-light")
    context.close()


def test_pipeline_panel_reads_what_tiermem_stats_reads(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    page.goto("/ui")
    page.get_by_role("link", name="Pipeline").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Pipeline")
    stats = _stats_json(memory_stack)
    shown = {
        row[0]: [int(cell) for cell in row[1:]]
        for row in page.locator("#consumer-table tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
        )
    }
    expected = {c["consumer"]: [c["pending"], c["ack_pending"], c["redelivered"]] for c in stats["consumers"]}
    assert shown == expected and len(shown) >= 4, (shown, expected)
    expect(page.locator("#pipeline-dead-letters")).to_have_text(str(stats["dead_letters"]))
    expect(page.locator("#pipeline-lag")).to_have_text(str(sum(c["pending"] for c in stats["consumers"])))
    cost = sum(row["cost_usd"] for row in stats["llm"])
    expect(page.locator("#pipeline-cost")).to_have_text(f"{cost:.4f}")
    if stats["llm"]:
        purposes = page.locator("#llm-table tbody tr td:first-child").all_inner_texts()
        assert purposes == [row["purpose"] for row in stats["llm"]]
    screenshot(page, "pipeline")
    context.close()


def test_add_session_form_goes_through_the_sessions_path(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    page.goto("/ui/u/sora")
    expect(page.locator("#count-episodes")).to_have_text("0")
    typed = (
        "user: I started learning the haegeum at a studio in Jeonju.\n"
        "assistant: A haegeum in Jeonju, lovely. How often are the lessons?\n"
        "user: Every Tuesday evening at seven."
    )
    page.get_by_label(re.compile("^Messages")).fill(typed)
    page.get_by_role("button", name="Add session").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Session added")
    event_id = page.locator("#session-event-id").inner_text()
    assert re.fullmatch(r"[0-9a-f-]{36}", event_id), event_id
    # The page follows the event until the pipeline is done with it.
    expect(page.locator("#session-state")).to_have_text("consolidated", timeout=120_000)
    screenshot(page, "add-session")
    with memory_stack.api(LOCAL_KEY) as api:
        status_body = api.get(f"/v1/events/{event_id}", params={"user_id": "sora"}).json()
    assert status_body["state"] == "consolidated"
    page.locator("#session-episode").click()
    expect(page.locator("#episode-summary")).to_contain_text("haegeum")
    page.goto("/ui/u/sora")
    expect(page.locator("#count-episodes")).to_have_text("1")
    expect(page.locator("#memory-list")).to_contain_text("haegeum")

    # The same turns again are the same event: a duplicate, nothing new.
    page.get_by_label(re.compile("^Messages")).fill(typed)
    page.get_by_role("button", name="Add session").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Session already added")
    expect(page.locator("#session-event-id")).to_have_text(event_id)

    # Bad input: the form again, with what was typed and the reason.
    page.goto("/ui/u/sora")
    page.get_by_label(re.compile("^Messages")).fill("user: hello\nassistant:")
    with page.expect_response(lambda r: r.url.endswith("/ui/u/sora/sessions")) as posted:
        page.get_by_role("button", name="Add session").click()
    assert posted.value.status == 422
    expect(page.locator("#add-error")).to_contain_text("turn 2 has a role but no text")
    expect(page.get_by_label(re.compile("^Messages"))).to_have_value("user: hello\nassistant:")
    context.close()
    with httpx.Client(base_url=memory_stack.base_url, timeout=30) as client:
        assert client.post("/ui/login", data={"api_key": LOCAL_KEY}).status_code == 303
        refused = client.post("/ui/u/sora/sessions", data={"messages": "user: no token"})
        assert refused.status_code == 403, "the form needs the session's CSRF token like every other"


def test_graph_fills_its_canvas_and_pans(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    page.goto("/ui/u/minji")
    page.get_by_label("Entity (a name or words naming it)").fill("DGIA")
    page.get_by_role("button", name="Show graph").click()
    svg = page.locator("#entity-graph")
    nodes = page.locator("#entity-graph .node circle")
    expect(nodes).not_to_have_count(0)
    frame = svg.bounding_box()
    assert frame is not None
    boxes = [box for box in (nodes.nth(i).bounding_box() for i in range(nodes.count())) if box is not None]
    xs = [box["x"] + box["width"] / 2 - frame["x"] for box in boxes]
    ys = [box["y"] + box["height"] / 2 - frame["y"] for box in boxes]
    if len(boxes) == 1:
        assert abs(xs[0] - frame["width"] / 2) < 0.1 * frame["width"]
    else:
        assert max(xs) - min(xs) >= 0.7 * frame["width"], "the nodes spread across the canvas"
    assert all(0 < y < frame["height"] for y in ys)
    screenshot(page, "entity-graph")

    first = nodes.first.bounding_box()
    assert first is not None
    page.mouse.move(frame["x"] + frame["width"] / 2, frame["y"] + 10)
    page.mouse.down()
    page.mouse.move(frame["x"] + frame["width"] / 2 - 120, frame["y"] + 40, steps=6)
    page.mouse.up()
    expect(svg).to_have_attribute("data-panned", "true")
    dragged = nodes.first.bounding_box()
    assert dragged is not None
    assert abs((dragged["x"] - first["x"]) - -120) < 6 and abs((dragged["y"] - first["y"]) - 30) < 6, dragged

    svg.focus()
    page.keyboard.press("Home")
    expect(svg).to_have_attribute("data-panned", "false")
    page.keyboard.press("ArrowRight")
    expect(svg).to_have_attribute("data-panned", "true")
    moved = nodes.first.bounding_box()
    assert moved is not None and moved["x"] < first["x"], "the arrow key moved the view"
    context.close()


def _fact_id_of(page: Page) -> str:
    match = re.search(r"/facts/([0-9a-f-]{36})$", page.url)
    assert match, page.url
    return match.group(1)


def _correct_korean_fact(page: Page) -> None:
    page.goto("/ui/u/minji?kind=fact")
    page.get_by_role("link", name="사용자는 부산에 살고 있다.").click()
    expect(page.locator("#fact-history tbody tr")).to_have_count(2)  # Seoul, superseded by 부산
    page.get_by_label("Corrected value").fill("대구")
    page.get_by_label("Corrected fact, as one sentence").fill("사용자는 대구에 살고 있다.")
    page.get_by_role("button", name="Save correction").click()
    expect(page.locator("#fact-text")).to_have_text("사용자는 대구에 살고 있다.")
    history = page.locator("#fact-history tbody tr")
    expect(history).to_have_count(3)
    expect(history.nth(0)).to_contain_text("Seoul")
    expect(history.nth(1)).to_contain_text("부산")
    expect(history.nth(1)).to_contain_text("superseded")
    expect(history.nth(2)).to_contain_text("대구")
    expect(history.nth(2)).to_contain_text("api (user)")
    screenshot(page, "fact-history-ko")


def _forget_vegetarian_fact(page: Page, stack: MemoryStack) -> None:
    page.goto("/ui/u/minji?kind=fact")
    page.get_by_role("link", name="The user is vegetarian.").click()
    fact_id = _fact_id_of(page)
    fact_link = f'a[href$="/facts/{fact_id}"]'
    page.goto("/ui/u/minji")
    _search(page, "vegetarian", kind="fact")
    expect(page.locator(f"#search-results {fact_link}")).to_have_count(1)
    _preview_l0(page, "I'm vegetarian: where should the team have lunch?")
    expect(page.locator(f"#l0-candidates {fact_link}")).to_have_count(1)
    expect(page.locator("#l0-threshold")).to_have_text(re.compile(r"^0\.\d{3}$"))
    with stack.api(LOCAL_KEY) as api:
        message = "I'm vegetarian: where should the team have lunch?"
        auto = api.post("/v1/recall/auto", json={"user_id": "minji", "message": message}).json()
    assert page.locator("#l0-section").inner_text() == auto["section"], "the preview is what L0 injects"
    screenshot(page, "l0-preview")
    page.goto(f"/ui/u/minji/facts/{fact_id}")
    page.get_by_role("button", name="Forget fact").click()
    expect(page.locator("#event-state")).to_have_text("erasure completed", timeout=90_000)
    page.goto("/ui/u/minji")
    _search(page, "vegetarian", kind="fact")
    expect(page.locator(fact_link)).to_have_count(0)
    _preview_l0(page, "I'm vegetarian: where should the team have lunch?")
    expect(page.locator(fact_link)).to_have_count(0)
    page.goto(f"/ui/u/minji/facts/{fact_id}")
    expect(page.get_by_role("alert")).to_have_text("memory not found")


def test_click_through_search_episode_correct_forget_erase(browser: Browser, memory_stack: MemoryStack) -> None:
    context = open_context(browser, memory_stack, LOCAL_KEY)
    page = context.new_page()
    page.goto("/ui")
    page.get_by_role("link", name="minji", exact=True).click()
    expect(page.locator("#memory-list")).to_contain_text("온비서")

    _search(page, "DGIA billing service in Go")
    first = page.locator("#search-results li a").first
    expect(first).to_contain_text("DGIA billing service")
    first.click()
    expect(page.locator("#episode-summary")).to_contain_text("DGIA")
    expect(page.locator("#recall-count")).to_contain_text("time")
    page.get_by_text("Source messages").click()
    expect(page.locator("#source-messages .messages li").first).to_contain_text("Quick one before standup")
    expect(page.locator("ol.passages li")).not_to_have_count(0)
    screenshot(page, "episode")

    page.goto("/ui/u/minji")
    page.get_by_label("Entity (a name or words naming it)").fill("DGIA")
    page.get_by_role("button", name="Show graph").click()
    expect(page.locator("#entity-graph .node")).not_to_have_count(0)
    expect(page.locator("#entity-table")).to_contain_text("DGIA")

    _correct_korean_fact(page)
    _forget_vegetarian_fact(page, memory_stack)

    page.goto("/ui/u/minji")
    page.get_by_label("Type minji to confirm").fill("minji")
    page.get_by_role("button", name="Erase user").click()
    expect(page.locator("#audit-table tbody tr")).not_to_have_count(0)
    expect(page.locator("#event-state")).to_have_text("erasure completed", timeout=120_000)
    expect(page.locator("#audit-remaining")).to_have_text("0", timeout=120_000)
    expect(page.locator("#progress")).to_have_attribute("data-complete", "true")
    screenshot(page, "erasure-audit")
    page.goto("/ui/u/minji")
    expect(page.locator("#memory-list-empty")).to_be_visible()
    context.close()

    # The other tenant's user of the same name keeps everything.
    other = open_context(browser, memory_stack, OTHER_KEY)
    page = other.new_page()
    page.goto("/ui/u/minji")
    expect(page.locator("#memory-list")).to_contain_text("Kestrel")
    other.close()


def test_screenshots_dark_and_phone(browser: Browser, memory_stack: MemoryStack) -> None:
    """Dark mode follows prefers-color-scheme; the phone layout has no horizontal scroll."""
    dark = open_context(browser, memory_stack, OTHER_KEY, color_scheme="dark")
    page = dark.new_page()
    page.goto("/ui/u/minji")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(21, 23, 26)", background
    _preview_l0(page, "How is the Kestrel robot project going?")
    expect(page.locator("#l0-section")).to_contain_text("Kestrel")
    screenshot(page, "l0-preview-dark")
    dark.close()

    keyboard = open_context(browser, memory_stack, OTHER_KEY)
    page = keyboard.new_page()
    page.goto("/ui/u/minji")
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    for _ in range(20):  # from the main landmark, Tab reaches the search box without the mouse
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "q":
            break
    expect(page.get_by_label("Query")).to_be_focused()
    page.keyboard.type("Kestrel robot")
    page.keyboard.press("Enter")
    expect(page.locator("#search-results")).to_contain_text("Kestrel")
    keyboard.close()

    phone = open_context(browser, memory_stack, OTHER_KEY, viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    page.goto("/ui/u/minji")
    _search(page, "Kestrel robot")
    expect(page.locator("#search-results")).to_contain_text("Kestrel")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at phone width"
    screenshot(page, "search-phone")
    phone.close()


def test_nothing_typed_into_the_browser_reaches_the_logs(memory_stack: MemoryStack) -> None:
    """Searches, L0 previews and corrections travel in POST bodies: neither a URL nor a log line
    of the whole stack carries them."""
    logged = memory_stack.log_path.read_text(encoding="utf-8", errors="replace")
    typed = [
        "cello orchestra Incheon",
        "Kestrel warehouse robot",
        "사용자는 대구에 살고",
        "where should the team have lunch",
    ]
    assert [text for text in typed if text in logged] == []
    assert len(memory_stack.requested_urls) > 50, "the browser tests ran before this one"
    urls = " ".join(unquote_plus(url) for url in memory_stack.requested_urls)
    assert [text for text in typed if text in urls] == []
