"""A collection's BM25 keyword index in tantivy (``index.py``) and the settings of the processors over it
(``settings.py``)."""
