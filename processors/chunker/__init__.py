"""Documents to chunks to stores (document-load, document-delete)."""

from .chunking import as_stored, chunk_document, split_text
from .processor import ChunkerProcessor, DocumentDeleteProcessor
from .settings import ChunkerSettings

__all__ = ["ChunkerProcessor", "ChunkerSettings", "DocumentDeleteProcessor", "as_stored", "chunk_document",
           "split_text"]
