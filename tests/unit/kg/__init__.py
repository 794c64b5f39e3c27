"""Unit tests of the knowledge-graph path: linking, ontology, typed and time-scoped retrieval."""
