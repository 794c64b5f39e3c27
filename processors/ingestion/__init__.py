"""Ingestion: reading a document (a file, an upload's bytes, a text), converting it, and sending it in parts.

The one ingestion layer every client calls: ``ragbus ingest``, the gateway's uploads, first use,
and a user's own code. Above the runtime (it sends over a ``RequestClient``), below the faces: it
imports neither the gateway nor the command line. Failures are typed (``errors.py``), so each face
maps them by type. A library rather than a step on the bus: converting reads the file where it is
(a path, an upload already in the caller's memory) and streams its text in parts that fit a message,
so a converter on the bus would first need the whole file carried to it.
"""

from ragbus.runtime.collection_check import empty_collection

from .errors import DocumentRejected, UnreadableDocument, UnsupportedFormat
from .files import builtin_corpus, find_files, load_documents
from .send import IngestSummary, Sent, ingest, send_document
from .sources import DocumentSource, Section, document_id, file_hash, open_bytes, open_document

__all__ = [
    "DocumentRejected", "DocumentSource", "IngestSummary", "Section", "Sent", "UnreadableDocument",
    "UnsupportedFormat", "builtin_corpus", "document_id", "empty_collection", "file_hash", "find_files", "ingest",
    "load_documents", "open_bytes", "open_document", "send_document",
]
