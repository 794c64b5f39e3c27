"""``uploads.with_pages``: the pages a job is told of from another thread, in order, then its result or
its failure; a reader that stops early leaves the job to finish."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ragbus.gateway import uploads
from ragbus.gateway.errors import HTTPError
from ragbus.ingestion.convert import Page

from ..helpers.waiting import until


def convert_in_thread(pages: int, fail_at: int | None = None, gate: threading.Event | None = None):
    """A job that tells of its pages from a thread of its own, as ``open_bytes`` does in ``asyncio.to_thread``."""

    async def job(told):
        on_loop = uploads._on_loop(told)

        def convert() -> str:
            for number in range(1, pages + 1):
                if number == fail_at:
                    raise HTTPError(422, "UnreadableDocument", f"scan.tiff: page {number} cannot be decoded", "file")
                on_loop(Page(number, pages, ocr=True))
                if gate is not None:
                    gate.wait(30)
            return "stored"

        return await asyncio.to_thread(convert)

    return job


async def events_of(job) -> list:
    return [event async for event in uploads.with_pages(job)]


def test_pages_from_another_thread_come_in_order_then_the_result():
    events = asyncio.run(events_of(convert_in_thread(5)))
    assert events == [Page(n, 5, ocr=True) for n in range(1, 6)] + ["stored"]


def test_a_failure_comes_after_the_pages_told_before_it():
    async def main():
        seen = []
        with pytest.raises(HTTPError) as failed:
            async for event in uploads.with_pages(convert_in_thread(3, fail_at=3)):
                seen.append(event)
        return seen, failed.value

    seen, error = asyncio.run(main())
    assert seen == [Page(1, 3, ocr=True), Page(2, 3, ocr=True)]
    assert (error.status, error.type) == (422, "UnreadableDocument")


def test_a_job_with_no_pages_gives_its_result_alone():
    async def job(told):
        return "stored"

    assert asyncio.run(events_of(job)) == ["stored"]


def test_a_reader_that_stops_early_leaves_the_job_to_finish():
    gate = threading.Event()
    finished = []

    async def main():
        inner = convert_in_thread(2, gate=gate)

        async def job(told):
            result = await inner(told)
            finished.append(result)
            return result

        events = uploads.with_pages(job)
        assert await anext(events) == Page(1, 2, ocr=True)
        await events.aclose()  # the client went away
        assert len(uploads._left) == 1
        gate.set()
        await until(lambda: finished and not uploads._left, 30, lambda: f"finished {finished}, {uploads._left}")

    asyncio.run(main())
    assert finished == ["stored"] and not uploads._left
