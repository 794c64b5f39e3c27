"""The stores and their replication: what a collection's state is on disk and how it is made from the log.

One layer above the runtime and below the processors: the store processors (doc-embeddings,
keyword, library, kg) and documents-replica are thin adapters over it.

- ``layout.py``: where each store of a collection lives in a data dir;
- ``append_file.py``: ``AppendFile``, the one append-only file type (frames, a torn tail cut);
- ``vectors/``: a collection's vectors in faiss, and ``VectorCollections``, their reads and writes;
- ``keywords/``: a collection's BM25 index in tantivy, its readers and its one writer per data dir;
- ``library.py``: which documents each collection holds; ``graph_log.py``: the file a graph is made from,
  and ``graph_files.py``: the graphs of a data dir made from theirs, with their one writer;
- ``graphs_from_log.py``: the graphs made from the graph's log topic instead, every replica its own;
- ``staging.py``: a document's version staged beside the stores until it is switched to;
- ``writer_lock.py``: one writer process per store of a data dir; ``local_writes.py``: what a writer of
  this process published, so its readers reload at once;
- ``follower.py``: ``LogFollower``, a replica's state caught up with a log and following it;
  ``snapshots.py``: where it stands (a local copy of the records, or a checkpoint);
- ``seen.py``: a write appended to its log, and the reads that must see it;
- ``reports.py``: each replica's progress, reported on the bus;
- ``data_dir_watch.py``: a replica's data dir removed under it, noticed;
- ``documents_replica.py``: ``DocumentsReplica``, a host's document stores made from the documents log
  (its settings: ``replica_settings.py``);
- ``shards.py``: ``ShardedReplicas``, a query host's shards of them, owned through the broker;
  ``shard_assignment.py``: the policy that deals shards and standbys to hosts.

How it fits: docs/stores-from-the-log.md.
"""
