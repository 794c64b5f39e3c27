"""The stores and their replication: what a collection's state is on disk and how it is made from the log.

One layer above the runtime and below the processors: the store processors (doc-embeddings,
keyword, library, kg) and the documents replica are thin adapters over it. Where each store lives
in a data dir: ``layout.py``; the one append-only file type: ``append_file.py``; the stores
themselves: ``vectors/``, ``keywords/``, ``library.py``, ``graph_log.py``, ``staging.py``; a log
followed into them: ``follower.py``, ``snapshots.py``, ``seen.py``, ``reports.py``. How it fits:
docs/stores-from-the-log.md.
"""
