"""The keyword processors: BM25 over chunks with tantivy, safe for any raw query text.

- ``KeywordQueryProcessor``: ``KeywordQueryRequest`` -> ``KeywordQueryResponse`` (keyword-query);
- ``KeywordStoreProcessor``: ``EmbeddedChunks`` -> ``IngestResult`` (a chunk-store consumer);
- ``KeywordDeleteProcessor``: ``DeleteDocument`` -> ``IngestResult`` (a document-delete consumer).

One index per collection in ``<data_dir>/<collection>/tantivy/``. How queries
are tokenised and identifiers matched: ``index.py``. Settings and their
defaults: ``settings.py``.
"""

from .index import KeywordIndex
from .processor import KeywordDeleteProcessor, KeywordQueryProcessor, KeywordStoreProcessor
from .settings import KeywordSettings

__all__ = [
    "KeywordDeleteProcessor",
    "KeywordIndex",
    "KeywordQueryProcessor",
    "KeywordSettings",
    "KeywordStoreProcessor",
]
