"""document-convert on the bus: a PDF's bytes in several parts to one worker, its pages streamed back.

Real processors on the memory bus and on Apache Kafka; the PDF is LibreOffice's (about 200 KB with its
fonts), and a small ``max_message_bytes`` makes its upload take several parts.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import pytest

from ragbus.bus import connect
from ragbus.cli.library import list_documents
from ragbus.config import pipelines
from ragbus.config.settings import ConvertSettings, load_settings
from ragbus.ingestion import UnreadableDocument, convert_on_bus, ingest, load_documents, open_document
from ragbus.ingestion.convert import Page
from ragbus.ingestion.sources import remote_bytes, remote_file
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import RemoteError
from ragbus.runtime.worker import processors_running
from ragbus.schema import FILE_TOO_LARGE, RESTART_UPLOAD, ConvertPart, ConvertReply
from ragbus.schema import topics as t

from ragbus.testing.chaos import WorkerProcess, worker_env

from ..helpers.brokers import settings_for_tests
from ..helpers.documents_made import write_pdf
from ..helpers.ingest_pipeline import pipeline
from ..helpers.scans_made import pages_of

MAX_MESSAGE_BYTES = 48_000
ON_BUS = ConvertSettings(on_bus=True)
WORDS = ["lighthouse", "keeper", "storm", "ledger", "harbour", "pilot", "beacon", "tide", "current", "reef",
         "channel", "buoy", "signal", "lantern", "watch", "gale"]


@pytest.fixture(params=["memory", "kafka", "pulsar"])
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def pdf(tmp_path_factory):
    """A PDF of several pages and headings, LibreOffice's, about 200 KB with its fonts."""
    folder = tmp_path_factory.mktemp("pdf")
    sections = [(f"Chapter {i}: the {WORDS[i]}", [
        " ".join(f"{WORDS[(i * 7 + j) % len(WORDS)]}{j}" for j in range(k, k + 120)) + "." for k in range(0, 1200, 120)
    ]) for i in range(len(WORDS))]
    path = write_pdf(folder / "keepers-log.pdf", "The keeper's log", sections)
    assert path.stat().st_size > 2 * MAX_MESSAGE_BYTES, path.stat().st_size
    return path


@contextlib.asynccontextmanager
async def workers(bus_url, *, replicas: int = 1, env: dict | None = None):
    """``replicas`` document-convert workers on a bus of small messages, and a client of it."""
    bus_settings = settings_for_tests(max_message_bytes=MAX_MESSAGE_BYTES)
    settings = load_settings(environ=env or {})
    settings.bus = bus_settings
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(replicas):
            await stack.enter_async_context(processors_running(settings, ["document-convert"], bus_url,
                                                              ready_timeout=120))
        bus = await stack.enter_async_context(await connect(bus_url, bus_settings))
        yield await stack.enter_async_context(RequestClient(bus, name="convert-test", resend_after_s=30))


def local_text(path, pages: list | None = None):
    source = open_document(path, "default", ConvertSettings())
    if pages is not None:
        source.on_page.append(pages.append)
    text = "".join(source.read())
    return source.title, text, list(source.sections)


async def converted(client, path, *, restarts: int = 0, pages: list | None = None):
    source = remote_file(path, "default", ON_BUS, str(path))
    if pages is not None:
        source.on_page.append(pages.append)
    done = await convert_on_bus(client, source, timeout=120, restarts=restarts)
    return done.title, "".join(done.read()), list(done.sections)


async def test_a_pdf_in_parts_converts_as_it_does_here_a_page_at_a_time(bus_url, pdf):
    here: list[Page] = []
    title, text, sections = local_text(pdf, here)
    async with workers(bus_url) as client:
        pages: list[Page] = []
        sent_before = client.stats.sent
        assert await converted(client, pdf, pages=pages) == (title, text, sections)
        assert client.stats.sent - sent_before >= 4  # the parts, one request each (the last a stream)
    assert len(sections) >= len(WORDS) and title == "The keeper's log"
    # Each page as the converter met it here, told in the same order as it arrived.
    assert pages == here
    assert [p.number for p in pages] == list(range(1, len(pages) + 1))
    assert all(p.pages == len(pages) and not p.ocr for p in pages)


async def test_two_workers_share_two_documents_each_kept_on_one(bus_url, pdf, tmp_path):
    other = tmp_path / "other.pdf"
    other.write_bytes(pdf.read_bytes())  # the same bytes under another name: a document of its own
    expected = local_text(pdf)
    async with workers(bus_url, replicas=2) as client:
        # No restart allowed: every part of a file reached the worker that had the parts before it.
        results = await asyncio.gather(*(converted(client, p, restarts=0) for p in (pdf, other, pdf, other)))
    assert results == [expected] * 4


async def test_a_corrupt_file_is_an_error_naming_it_and_the_worker_answers_the_next(bus_url, pdf):
    async with workers(bus_url) as client:
        broken = remote_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 400, "scan-0042.pdf", collection="default",
                              document_id="scan-0042", title="", fallback="scan-0042.pdf", source="",
                              settings=ON_BUS)
        with pytest.raises(UnreadableDocument, match=r"scan-0042\.pdf") as caught:
            await convert_on_bus(client, broken, timeout=120)
        assert "/tmp" not in str(caught.value)  # the worker's own path is not the caller's business
        assert (await converted(client, pdf))[1] == local_text(pdf)[1]


class SkipsAPart:
    """A client that leaves out part 1 of its first upload, as if that part went to another worker."""

    def __init__(self, client: RequestClient) -> None:
        self.client, self.bus = client, client.bus
        self.uploads: list[str] = []
        self.skipped = False

    async def request(self, topic, message, response_type, **kwargs):
        if message.conversion_id not in self.uploads:
            self.uploads.append(message.conversion_id)
        if message.part == 1 and not self.skipped:
            self.skipped = True
            return ConvertReply(received=0)
        return await self.client.request(topic, message, response_type, **kwargs)

    def stream(self, *args, **kwargs):
        return self.client.stream(*args, **kwargs)


async def test_a_part_out_of_order_is_answered_restart_and_the_client_sends_again(bus_url, pdf):
    async with workers(bus_url) as client:
        stray = ConvertPart(conversion_id="never-opened", filename="a.pdf", part=3, last=False, data=b"x")
        reply = await client.request(t.DOCUMENT_CONVERT, stray, ConvertReply, timeout=60, key="never-opened")
        assert reply.error is not None and reply.error.type == RESTART_UPLOAD and "part 0" in reply.error.message
        skipping = SkipsAPart(client)
        source = remote_file(pdf, "default", ON_BUS, str(pdf))
        done = await convert_on_bus(skipping, source, timeout=120, restarts=2)  # type: ignore[arg-type]
    assert skipping.skipped and len(skipping.uploads) == 2  # refused once, then sent again from part 0
    assert "".join(done.read()) == local_text(pdf)[1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_a_worker_killed_mid_stream_has_the_file_sent_again_to_the_other(which, request, pdf, tmp_path):
    """kill -9 of the worker streaming a scan's pages: the resent last part reaches the other worker, which
    never had the file and says so, numbered before the pages already here; the client sends the file again."""
    url = request.getfixturevalue(f"{which}_broker").url
    first, *rest = pages_of(pdf, dpi=100)[:6]  # OCR'd at about a page a second, by one worker at a time
    scan = tmp_path / "scan.pdf"
    first.save(scan, save_all=True, append_images=rest, resolution=100)
    scratch = tmp_path / "scratch"
    env = worker_env(str(tmp_path), "unused", {"RAGBUS_PROCESSORS__DOCUMENT_CONVERT__SCRATCH_DIR": str(scratch),
                                                "RAGBUS_BUS__MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES)})
    alive = await asyncio.gather(*(WorkerProcess(["document-convert"], url, env).start() for _ in range(2)))
    killed: list[WorkerProcess] = []

    def on_page(page: Page) -> None:
        if killed:
            return
        # The worker streaming is the one whose scratch folder (named for its pid) holds the file.
        (holding,) = [folder for folder in scratch.iterdir() if any(folder.iterdir())]
        pid = int(holding.name.split("-")[3])
        (streaming,) = [w for w in alive if w.proc is not None and w.proc.pid == pid]
        streaming.kill()
        killed.append(streaming)

    try:
        async with await connect(url, settings_for_tests(max_message_bytes=MAX_MESSAGE_BYTES)) as bus, \
                RequestClient(bus, name="convert-kill", resend_after_s=5) as client:
            source = remote_file(scan, "default", ON_BUS, str(scan))
            source.on_page.append(on_page)
            done = await convert_on_bus(client, source, timeout=180, restarts=2)
            text = "".join(done.read())
    finally:
        for worker in alive:
            await worker.stop()
    assert killed and killed[0].proc is not None and killed[0].proc.returncode == -9
    assert text == local_text(scan)[1]  # every page, each once, as read here


async def test_a_file_over_max_file_bytes_is_refused(bus_url, pdf):
    env = {"RAGBUS_PROCESSORS__DOCUMENT_CONVERT__MAX_FILE_BYTES": str(MAX_MESSAGE_BYTES)}
    async with workers(bus_url, env=env) as client:
        source = remote_file(pdf, "default", ON_BUS, str(pdf))
        with pytest.raises(RemoteError, match="max_file_bytes") as caught:
            await convert_on_bus(client, source, timeout=120)
        assert caught.value.error.type == FILE_TOO_LARGE and caught.value.error.caller
        # A client that does not say the size is refused at the part that passes the limit.
        data = pdf.read_bytes()
        parts = [data[i:i + 30_000] for i in range(0, 120_000, 30_000)]
        replies = []
        for n, part in enumerate(parts):
            message = ConvertPart(conversion_id="unsized", filename="big.pdf", part=n, last=False, data=part)
            replies.append(await client.request(t.DOCUMENT_CONVERT, message, ConvertReply, timeout=60, key="unsized"))
            if replies[-1].error is not None:
                break
        assert replies[0].error is None and replies[-1].error is not None
        assert replies[-1].error.type == FILE_TOO_LARGE and len(replies) == 2


def test_the_language_a_request_carries_is_checked_like_the_setting():
    for good in ("", "eng", "eng+deu"):
        msgspec.convert({"conversion_id": "a", "filename": "a.pdf", "language": good}, ConvertPart)
    for bad in ("eng;rm -rf", "-l", "e", "eng+"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"conversion_id": "a", "filename": "a.pdf", "language": bad}, ConvertPart)


async def test_ingest_sends_a_pdf_through_the_lane_and_stores_what_it_stores_when_read_here(tmp_path, pdf,
                                                                                            monkeypatch):
    async with pipeline(f"memory://convert-{tmp_path.name}", tmp_path, monkeypatch, names=pipelines.INGEST) as client:
        (remote,), _ = load_documents([str(pdf)], "lane", ON_BUS)
        (here,), _ = load_documents([str(pdf)], "here", ConvertSettings())
        assert remote.on_bus is not None and here.on_bus is None
        lane = await ingest(client, [remote], timeout=120)
        local = await ingest(client, [here], timeout=120)
        (stored,) = await list_documents(client, "lane", timeout=30)
    assert lane.failed == [] and local.failed == [] and lane.documents == 1
    assert lane.chunks == local.chunks > 10
    # The document's own title, from the worker's last piece; the hash of the file's bytes, as read here.
    assert stored.title == "The keeper's log" and stored.content_hash == here.content_hash == remote.content_hash
