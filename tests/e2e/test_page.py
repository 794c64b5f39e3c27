"""The web page of ``ragbus serve`` in a real headless Chromium (Debian's, driven by Playwright).

The gateway is the real command on the memory bus. Each state the tests reach is kept as a screenshot
under ``$RAGBUS_ARTIFACTS/page`` (CI keeps them). Every request the page makes is recorded: the page is
offline, so each goes to the gateway and nowhere else.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from ragbus.testing.gateway import GatewayProcess

from ..helpers.browser import FLAGS, chromium, screenshots
from ..helpers.documents_made import write_pdf
from ..helpers.scans_made import need_tesseract, scan_tiff
from ..helpers.serve_stores import stores

QUESTION = "How does the with statement use a context manager?"  # an answer of several lines: it streams in pieces
UK = "Who was head of government of the United Kingdom?"
FOLLOW_UP = "Which method runs before its block?"
MANUAL = [("Descaling", ["Descale the Zephyr espresso machine every forty days with citric acid."])]
SCANNED = [("grinder", "Zephyr Grinder", [("Grinding", ["Set the Zephyr grinder to step twelve for espresso."])]),
           ("milk", "Zephyr Milk", [("Milk", ["Steam the milk for the Zephyr cappuccino to sixty degrees."])])]


def data_dir(tmp_path_factory) -> str:
    """A data dir with the test documents and the sample graph, built on a thread of its own: Playwright's
    sync API keeps an event loop running on this one once a browser is up."""
    with ThreadPoolExecutor(1) as pool:
        return str(pool.submit(stores, tmp_path_factory).result())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": data_dir(tmp_path_factory)}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("page") / "serve.log") as g:
        yield g


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, gateway):
    """A fresh page on the gateway; afterwards, every URL it asked for is checked to be the gateway's."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    opened = context.new_page()
    requested: list[str] = []
    errors: list[str] = []
    opened.on("request", lambda r: requested.append(r.url))
    opened.on("pageerror", lambda e: errors.append(str(e)))
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" and "401" not in m.text else None)
    opened.goto(gateway.url + "/")
    expect(opened.locator("html")).to_have_attribute("data-ready", "true")
    expect(opened.locator("#collection")).to_have_value("default")
    yield opened
    context.close()
    assert requested and all(u.startswith(gateway.url + "/") for u in requested), requested
    assert not errors, errors


SHOTS = screenshots("page")


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def answer_lines(page: Page) -> list[str]:
    return [t.strip() for t in page.locator(".turn").last.locator(".answer p").all_inner_texts()]


def ask(page: Page, question: str) -> None:
    page.fill("#question", question)
    page.keyboard.press("Enter")
    expect(page.locator(".turn").last.locator(".answer")).not_to_have_class(re.compile("streaming"), timeout=60_000)


def test_the_answer_streams_in_and_a_citation_opens_its_chunk_and_document(page, gateway):
    whole = httpx.post(f"{gateway.url}/v1/ask", json={"question": QUESTION}, timeout=60).json()
    # Count the answer's renderings while it is still streaming: more than one means it came in pieces.
    page.evaluate("""() => {
        window.renders = 0;
        new MutationObserver(() => {
            if (document.querySelector('.answer.streaming p')) window.renders += 1;
        }).observe(document.getElementById('conversation'), {childList: true, subtree: true});
    }""")
    ask(page, QUESTION)
    shot(page, "01-answer")
    assert page.evaluate("window.renders") > 1
    lines = [line for line in whole["answer"].splitlines() if line.strip()]
    expected = [re.sub(r"\s*\[[^\]]+\]", "", line).strip() for line in lines]
    shown = [re.sub(r"\s*\d+$", "", line).strip() for line in answer_lines(page)]
    assert shown == expected
    first = page.locator(".turn .cite").first
    cited = first.get_attribute("title")
    assert cited in whole["cited"]
    chunk = next(c for c in whole["chunks"] if c["chunk_id"] == cited)
    sentence = next(e for e, line in zip(expected, lines, strict=True) if f"[{cited}]" in line)
    first.click()
    drawer = page.locator("#drawer")
    expect(drawer).to_be_visible()
    expect(page.locator("#drawer-title")).to_have_text(chunk["title"])
    assert " ".join(page.locator("#drawer-text").inner_text().split()) == " ".join(chunk["text"].split())
    expect(page.locator("#drawer-text mark").first).to_have_text(sentence)  # what the answer took from it
    expect(page.locator("#drawer-document")).to_contain_text(f"chunk {chunk['position'] + 1} of")
    expect(page.locator("#drawer-document")).to_contain_text(chunk["document_id"])
    shot(page, "02-citation-drawer")
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()
    # A follow-up in the same conversation is asked with it: the gateway says what it searched for instead.
    ask(page, FOLLOW_UP)
    expect(page.locator(".turn").last.locator(".meta-line")).to_contain_text(f"asked as “{FOLLOW_UP} (with statement")
    expect(page.locator(".turn").last.locator(".sources button").first).to_have_attribute("title", "with#0")
    shot(page, "03-follow-up")
    page.click("#new-conversation")
    ask(page, FOLLOW_UP)  # alone: nothing to condense it from
    expect(page.locator(".turn").last.locator(".meta-line")).not_to_contain_text("asked as")


def facts(page: Page) -> list[str]:
    return page.locator("#facts .fact").all_inner_texts()


def test_moving_the_time_control_changes_the_facts_and_as_of_shows_what_was_known(page):
    page.fill("#graph-question", UK)
    expect(page.locator("#graph-note")).to_contain_text("valid now")
    page.fill("#graph-date", "2008-03-01")
    page.dispatch_event("#graph-date", "change")
    expect(page.locator("#graph-note")).to_contain_text("valid at 2008-03-01")
    assert "Gordon Brown head_of_government_of United Kingdom" in facts(page)
    assert not any("David Cameron" in f for f in facts(page))
    shot(page, "04-graph-2008")
    slider = page.locator("#graph-time")
    slider.focus()
    for _ in range(4 * 12):  # four years on, a month a key press
        page.keyboard.press("ArrowRight")
    expect(page.locator("#graph-time-label")).to_have_text("2012-03")
    expect(page.locator("#graph-note")).to_contain_text("valid at 2012-03-01")
    expect(page.locator("#facts")).to_contain_text("David Cameron head_of_government_of United Kingdom")
    assert not any("Gordon Brown" in f for f in facts(page))
    shot(page, "05-graph-2012")
    page.fill("#graph-as-of", "2008-01-01")
    page.dispatch_event("#graph-as-of", "change")
    expect(page.locator("#graph-note")).to_contain_text("as recorded on 2008-01-01")
    expect(page.locator("#facts")).to_contain_text("Gordon Brown head_of_government_of United Kingdom")
    assert not any("David Cameron" in f for f in facts(page))  # not yet known in 2008
    shot(page, "06-graph-2012-as-known-in-2008")


def test_a_pdf_uploaded_with_progress_is_answered_then_deleted(page, tmp_path):
    pdf = write_pdf(tmp_path / "zephyr.pdf", "Zephyr Espresso Manual", MANUAL)
    page.evaluate("""() => {
        window.progressSeen = false;
        new MutationObserver(() => {
            if (!document.getElementById('upload-progress').hidden) window.progressSeen = true;
        }).observe(document.getElementById('upload-progress'), {attributes: true});
    }""")
    page.set_input_files("#upload-file", str(pdf))
    page.click("#upload-button")
    expect(page.locator("#upload-note")).to_contain_text("Stored zephyr.pdf", timeout=60_000)
    assert page.evaluate("window.progressSeen")
    row = page.locator("#documents tr", has_text="Zephyr Espresso Manual")
    expect(row).to_be_visible()
    shot(page, "07-uploaded")
    page.select_option("#mode", "keyword")
    ask(page, "How often should the Zephyr espresso machine be descaled?")
    assert any("forty days" in line for line in answer_lines(page))
    source = page.locator(".turn").last.locator(".sources button").first
    expect(source).to_contain_text("Zephyr Espresso Manual")
    shot(page, "08-upload-answered")
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name=re.compile("Delete")).click()
    expect(page.locator("#status")).to_contain_text("Deleted")
    expect(page.locator("#documents tr", has_text="Zephyr Espresso Manual")).to_have_count(0)


def test_a_scanned_tiff_shows_each_page_as_it_is_read_then_is_stored(page, gateway, tmp_path):
    need_tesseract()
    pdfs = [write_pdf(tmp_path / f"{name}.pdf", title, sections) for name, title, sections in SCANNED]
    tiff = scan_tiff(pdfs, tmp_path / "zephyr-scan.tiff")
    page.evaluate("""() => {
        window.notes = [];
        const note = document.getElementById('upload-note'), bar = document.getElementById('upload-progress');
        new MutationObserver(() => window.notes.push([note.textContent, bar.value, bar.max]))
            .observe(note, {childList: true, characterData: true, subtree: true});
    }""")
    page.set_input_files("#upload-file", str(tiff))
    page.click("#upload-button")
    expect(page.locator("#upload-note")).to_contain_text("page 2 of 2", timeout=120_000)
    shot(page, "09-scan-page-2-of-2")
    expect(page.locator("#upload-note")).to_contain_text("Stored zephyr-scan.tiff", timeout=120_000)
    shot(page, "10-scan-stored")
    notes = page.evaluate("window.notes")
    reading = [n for n in notes if n[0].startswith("Reading zephyr-scan.tiff: page")]
    assert [n[0] for n in reading] == [f"Reading zephyr-scan.tiff: page {k} of 2 (OCR)" for k in (1, 2)], notes
    assert [(n[1], n[2]) for n in reading] == [(1, 2), (2, 2)]  # the bar at k of n
    assert notes.index(reading[-1]) < next(i for i, n in enumerate(notes) if n[0].startswith("Stored"))
    expect(page.locator("#documents tr", has_text="zephyr-scan.tiff")).to_be_visible()
    listed = httpx.get(f"{gateway.url}/v1/documents", params={"collection": "default"}, timeout=60).json()
    (scan,) = [d for d in listed["documents"] if d["title"] == "zephyr-scan.tiff"]
    assert httpx.delete(f"{gateway.url}/v1/documents/{scan['document_id']}", timeout=60).status_code == 200


def test_keyboard_only_ask_open_a_source_close_it_and_move_the_time(page):
    for _ in range(20):  # Tab from the top of the page to the question
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "question":
            break
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type(QUESTION)
    page.keyboard.press("Enter")
    expect(page.locator(".turn .answer")).not_to_have_class(re.compile("streaming"), timeout=60_000)
    expect(page.locator("#question")).to_be_focused()
    for _ in range(30):  # back from the question to the answer's last source button
        page.keyboard.press("Shift+Tab")
        if page.evaluate("document.activeElement.dataset.chunk || ''"):
            break
    opener = page.evaluate("document.activeElement.dataset.chunk")
    assert opener
    shot(page, "09-keyboard-focus-on-a-source")
    page.keyboard.press("Enter")
    expect(page.locator("#drawer")).to_be_visible()
    expect(page.locator("#drawer-close")).to_be_focused()
    page.keyboard.press("Tab")  # the focus stays in the open drawer
    expect(page.locator("#drawer-close")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#drawer")).to_be_hidden()
    assert page.evaluate("document.activeElement.dataset.chunk") == opener  # back where it was
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "graph-time":
            break
    expect(page.locator("#graph-time")).to_be_focused()
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#graph-time-label")).not_to_have_text("now")
    shot(page, "10-keyboard-time-control")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": data_dir(tmp_path_factory), "RAGBUS_API_KEYS": "sk-admin, sk-atlas=read@atlas"}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("page-keys") / "serve.log") as g:
        doc = {"text": "The atlas room opens at nine.", "document_id": "atlas-hours", "collection": "atlas"}
        stored = httpx.post(f"{g.url}/v1/documents", json=doc, headers={"Authorization": "Bearer sk-admin"})
        assert stored.status_code == 201
        yield g


def test_the_page_asks_for_a_key_and_shows_only_what_it_may_read(browser, keyed):
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.goto(keyed.url + "/")
    expect(page.locator("#key-dialog")).to_be_visible()
    shot(page, "11-key-asked")
    page.fill("#key-input", "sk-atlas")
    page.keyboard.press("Enter")
    expect(page.locator("#key-dialog")).to_be_hidden()
    expect(page.locator("#collection option")).to_have_count(1)
    expect(page.locator("#collection")).to_have_value("atlas")
    expect(page.locator("#documents tr", has_text="atlas-hours")).to_be_visible()
    ask(page, "When does the atlas room open?")
    assert any("nine" in line for line in answer_lines(page))
    shot(page, "12-scoped-key")
    # What the page would send for another collection is refused by the gateway, as for any client.
    status = page.evaluate("""async () => (await fetch('/v1/documents?collection=default',
        {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('ragbus.key')}})).status""")
    assert status == 403
    context.close()


def key_page(browser, gateway, key: str, viewport: dict | None = None) -> tuple:
    """A new page on ``gateway`` given ``key`` in its dialog, once it has listed the key's collections."""
    context = browser.new_context(viewport=viewport or {"width": 1366, "height": 900})
    page = context.new_page()
    page.goto(gateway.url + "/")
    page.fill("#key-input", key)
    page.keyboard.press("Enter")
    expect(page.locator("#key-dialog")).to_be_hidden()
    expect(page.locator("#documents tr").first).to_be_visible()
    return context, page


def test_a_read_only_key_is_offered_no_upload_and_no_delete_and_a_writer_is(browser, keyed):
    """The page asks the gateway what the key may do (GET /v1/key): a key of role read sees neither the
    upload nor a Delete it would only be refused after a click; an admin key sees both."""
    context, page = key_page(browser, keyed, "sk-atlas")
    expect(page.locator("#documents tr", has_text="atlas-hours")).to_be_visible()
    expect(page.locator("#upload-form")).to_be_hidden()
    expect(page.get_by_role("button", name=re.compile("Delete"))).to_have_count(0)
    expect(page.locator("#write-note")).to_have_text("This key may read collection atlas, not add or delete "
                                                     "documents (its role is read).")
    shot(page, "13-read-only-key")
    context.close()
    context, page = key_page(browser, keyed, "sk-admin")
    page.select_option("#collection", "atlas")
    expect(page.locator("#upload-form")).to_be_visible()
    expect(page.locator("#documents tr", has_text="atlas-hours").get_by_role("button", name=re.compile("Delete"))
           ).to_be_visible()
    shot(page, "14-admin-key")
    context.close()


ODD_ID = "notes <draft> & plans v2"  # an id with markup characters, an ampersand and spaces


@pytest.fixture(scope="module")
def odd_document(gateway):
    doc = {"text": "The greenhouse vents open at twenty-six degrees.", "document_id": ODD_ID,
           "collection": "odd-ids"}
    stored = httpx.post(f"{gateway.url}/v1/documents", json=doc, timeout=60)
    assert stored.status_code == 201, stored.text
    return doc


def test_a_citation_of_an_id_with_markup_characters_and_spaces_is_a_chip_shown_as_text(page, odd_document):
    page.select_option("#collection", "odd-ids")
    page.select_option("#mode", "keyword")
    ask(page, "When do the greenhouse vents open?")
    chip = page.locator(".turn .answer .cite").first
    expect(chip).to_have_attribute("title", f"{ODD_ID}#0")
    assert all(f"[{ODD_ID}" not in line for line in answer_lines(page))  # no citation left as raw text
    expect(page.locator(".turn .sources button").first).to_have_text(f"1. {ODD_ID}")
    assert page.locator(".turn .answer draft").count() == 0  # the id is text, never markup
    shot(page, "15-odd-id-citation")
    chip.click()
    expect(page.locator("#drawer-document")).to_contain_text(ODD_ID)
    shot(page, "16-odd-id-drawer")


def test_on_a_phone_the_question_box_and_the_page_fit_the_screen(browser, gateway):
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                  has_touch=True)
    page = context.new_page()
    page.goto(gateway.url + "/")
    expect(page.locator("html")).to_have_attribute("data-ready", "true")
    expect(page.locator("#collection")).to_have_value("default")
    shot(page, "17-phone")
    ask(page, QUESTION)
    shot(page, "18-phone-answer")
    shot(page, "19-phone-whole-page", full_page=True)
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing runs off to the side
    for box in ("#question", "#ask-form", "#ask-button", ".bar", "#graph-question", "#upload-form"):
        bounds = page.locator(box).bounding_box()
        assert bounds is not None and bounds["x"] >= 0 and bounds["x"] + bounds["width"] <= width, (box, bounds)
    context.close()

