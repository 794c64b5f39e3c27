"""The document library: which documents each collection holds, so they can be listed, kept up to date
and pruned (the store: ``processors/stores/library.py``), and its processors, document-record and
documents-query (``processor.py``)."""

from .processor import DocumentRecordProcessor, DocumentsQueryProcessor
from .settings import LibrarySettings
from ragbus.stores.library import Library
from ragbus.stores.layout import collections, library_path

__all__ = ["DocumentRecordProcessor", "DocumentsQueryProcessor", "Library", "LibrarySettings", "collections",
           "library_path"]
