"""The web page at ``/`` of ``ragbus serve``: plain HTML, CSS and one JavaScript module, shipped in the package.

No build step and nothing fetched from elsewhere: the files in ``web/`` are served as they are, under a
Content-Security-Policy that lets the page reach only the gateway itself. The page holds no data of its
own; it asks the gateway's REST routes (``/v1/ask`` streamed, ``/v1/kg/query``, ``/v1/documents``,
``/v1/collections``) with the key the user types, so every key's scope is enforced as for any client.
The files are therefore open (the guard lets ``/`` and ``/page/`` through without a key).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ragbus.ingestion.convert import SUFFIXES

WEB = Path(__file__).with_name("web")
PREFIX = "/page"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def index_html() -> str:
    """The page, with the file types ``ragbus ingest`` reads filled into its upload field."""
    return (WEB / "index.html").read_text(encoding="utf-8").replace("{{accept}}", ",".join(SUFFIXES))


class _Files(StaticFiles):
    async def get_response(self, path: str, scope):
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def routes() -> list[BaseRoute]:
    html = index_html()

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(html, headers=HEADERS)

    return [Route("/", index, methods=["GET"]), Mount(PREFIX, app=_Files(directory=WEB), name="page")]
