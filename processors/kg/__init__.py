"""The knowledge graph: entity linking, ontology checks, time-scoped facts, and its processors.

- ``link_entities``: which known entities a question names (``linking.py``);
- ``Ontology`` and its ``check_triple`` (``ontology.py``);
- ``retrieve_triples``: facts about the linked entities, schema-checked (``triples.py``);
- ``TemporalGraphRetriever`` and ``RetrievedContext``: contexts filtered to an instant (``temporal.py``);
- ``ContextRetriever``: all of it in-process, for library users without a bus (``facade.py``);
- ``GraphStore``: the networkx multigraph, bi-temporal, rebuilt from a log (``store.py``, the log in
  ``processors/stores/graph_log.py``), refusing what ``validation.py`` says it must;
- ``KgQueryProcessor`` (kg-query) and ``KgStoreProcessor`` (triples-load) (``processor.py``), the
  graph made from the bus's log instead of a file (``processors/stores/graphs_from_log.py``), and the
  facts an answer keeps (``answering.py``).

Graph files (facts as JSON Lines) are read by ``files.py``; the ``ragbus kg`` commands live with the
other commands, in ``processors/cli/``.

How times are read and compared: ``schema/times.py``. Settings and defaults: ``settings.py``.
"""

from ragbus.schema.times import TimeError, parse_instant

from .facade import ContextRetriever
from .linking import EntityLinker, link_entities
from .ontology import Ontology, OntologyError
from .processor import KgQueryProcessor, KgStoreProcessor
from .settings import KgSettings
from .store import GraphStore
from .temporal import (
    DEFAULT_HEADER_TEMPLATE,
    RetrievedContext,
    TemporalGraphRetriever,
    render_header,
)
from .triples import retrieve_triples

__all__ = [
    "DEFAULT_HEADER_TEMPLATE",
    "ContextRetriever",
    "EntityLinker",
    "GraphStore",
    "KgQueryProcessor",
    "KgSettings",
    "KgStoreProcessor",
    "Ontology",
    "OntologyError",
    "RetrievedContext",
    "TemporalGraphRetriever",
    "TimeError",
    "link_entities",
    "parse_instant",
    "render_header",
    "retrieve_triples",
]
