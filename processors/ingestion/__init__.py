"""Ingestion: reading a document (a file, an upload's bytes, a text), converting it, and sending it in parts.

The one ingestion layer every client calls: ``ragbus ingest``, the gateway's uploads, first use,
and a user's own code. Above the runtime (it sends over a ``RequestClient``), below the faces: it
imports neither the gateway nor the command line. Failures are typed (``errors.py``), so each face
maps them by type. Converting is a library (``convert/``) run where the file is, except that with
``[convert] on_bus`` PDFs and images are sent to document-convert, a step on the bus that scales with
its workers, since OCR takes about a second a page (``remote.py``). Either way each page is told to
the source's ``on_page`` listeners as it is read, and ``ingest`` shows it as progress ("page k of n").
"""

from ragbus.runtime.collection_check import empty_collection

from .errors import DocumentRejected, UnreadableDocument, UnsupportedFormat
from .files import builtin_corpus, find_files, load_documents
from .remote import UploadRestarts, convert_on_bus
from .send import IngestSummary, Sent, ingest, page_label, send_document
from .sources import DocumentSource, OnBus, Section, document_id, file_hash, goes_on_bus, open_bytes, open_document

__all__ = [
    "DocumentRejected", "DocumentSource", "IngestSummary", "OnBus", "Section", "Sent", "UnreadableDocument",
    "UnsupportedFormat", "UploadRestarts", "builtin_corpus", "convert_on_bus", "document_id", "empty_collection",
    "file_hash", "find_files", "goes_on_bus", "ingest", "load_documents", "open_bytes", "open_document",
    "page_label", "send_document",
]
