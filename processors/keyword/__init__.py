"""The keyword processors: BM25 over chunks with tantivy, safe for any raw query text.

- ``KeywordQueryProcessor``: ``KeywordQueryRequest`` -> ``KeywordQueryResponse`` (keyword-query);
- ``KeywordStoreProcessor``: ``EmbeddedChunks`` -> ``IngestResult`` (a chunk-store consumer);
- ``KeywordDeleteProcessor``: ``DeleteDocument`` -> ``IngestResult`` (a document-delete consumer).

One index per collection in ``<data_dir>/<collection>/tantivy/``. How queries
are tokenised and identifiers matched: ``processors/stores/keywords/index.py``. Settings and
their defaults: ``processors/stores/keywords/settings.py``.
"""

from ragbus.stores.keywords.index import KeywordIndex
from ragbus.stores.keywords.settings import KeywordSettings

from .processor import KeywordDeleteProcessor, KeywordQueryProcessor, KeywordStoreProcessor

__all__ = [
    "KeywordDeleteProcessor",
    "KeywordIndex",
    "KeywordQueryProcessor",
    "KeywordSettings",
    "KeywordStoreProcessor",
]
