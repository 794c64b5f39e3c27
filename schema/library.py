"""Messages of the document library: which documents a collection holds, and which collections there are.

document-load records each document once every store has switched to it (``RecordDocument``, with
the version served, ``generation``), and
document-delete (or a failed load) removes the record, so the library lists exactly what the
stores hold. ``documents-query`` answers listings (``ragbus documents``, ``ragbus collections``)
and document-load's question whether a document is held already with the same content.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .common import Count, Error, MustSee
from .retrieval import DEFAULT_COLLECTION


class DocumentInfo(msgspec.Struct, kw_only=True):
    """One document of a collection, as the library knows it."""

    document_id: str
    title: str = ""
    source: str = ""
    chunks: Count = 0
    # sha256 of the file's bytes (of the title and text for a document sent from memory), as "sha256:<hex>".
    content_hash: str = ""
    # How it was cut into chunks ("chunk_size/chunk_overlap"): the same content cut otherwise is not the same.
    chunking: str = ""
    ingested_at: str | None = None  # ISO 8601, stamped by the library's writer
    # The version the stores serve (``ragbus.schema.ingest.generation_of``); "" if recorded before versions.
    generation: str = ""
    collection: str = DEFAULT_COLLECTION
    # With stores from the log: where the log holds the switch to this version (``topic@position``).
    seen: str = ""


class RecordDocument(msgspec.Struct, kw_only=True):
    """A document now stored whole (``document``), or one removed from every store (``removed``)."""

    document: DocumentInfo
    removed: bool = False


class ListDocuments(msgspec.Struct, kw_only=True):
    """The documents of a collection in id order, a page at a time; or, with ``collections``, the collections.

    ``document_ids`` keeps only those; ``id_prefix`` only ids starting with it (a folder's files);
    ``after`` starts after that id (the last of the page before). ``collection`` is required, as
    every request names what it asks about (with ``collections`` it is not read).
    """

    collection: str
    document_ids: list[str] = []
    id_prefix: str = ""
    after: str = ""
    limit: Annotated[int, msgspec.Meta(ge=1)] = 500
    must_see: MustSee = []
    collections: bool = False


class DocumentList(msgspec.Struct, kw_only=True):
    documents: list[DocumentInfo] = []
    collections: list[str] = []
    # More documents follow this page: ask again with ``after`` the last id.
    more: bool = False
    error: Error | None = None
