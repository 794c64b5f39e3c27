"""Documents to chunks to stores (document-load, document-delete)."""

from .chunking import as_stored, chunk_document, split_text
from .processor import DocumentLoadProcessor, DocumentDeleteProcessor
from .settings import DocumentLoadSettings

__all__ = ["DocumentDeleteProcessor", "DocumentLoadProcessor", "DocumentLoadSettings", "as_stored", "chunk_document",
           "split_text"]
