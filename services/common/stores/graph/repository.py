"""The entity graph repository every service uses: `GraphRepository(executor)` runs all the Cypher
tiermem sends, portable across FalkorDB and Neo4j. The data model it reads and writes is specified
in `model`; the queries live in `write_queries`, `read_queries` and `erasure_queries`; the methods
are grouped into `writes`, `reads` and `erasure`. The public names of the model are re-exported here
so importers need only this module."""

from __future__ import annotations

from services.common.stores.graph.erasure import GraphErasure
from services.common.stores.graph.model import DEFAULT_ENTITY_TYPE as DEFAULT_ENTITY_TYPE
from services.common.stores.graph.model import ENTITY_KEY_NAMESPACE as ENTITY_KEY_NAMESPACE
from services.common.stores.graph.model import EntityInput as EntityInput
from services.common.stores.graph.model import EntityNotFoundError as EntityNotFoundError
from services.common.stores.graph.model import EntityRecord as EntityRecord
from services.common.stores.graph.model import EntityUpsertResult as EntityUpsertResult
from services.common.stores.graph.model import EntityUpserts as EntityUpserts
from services.common.stores.graph.model import EpisodeRef as EpisodeRef
from services.common.stores.graph.model import GraphResult as GraphResult
from services.common.stores.graph.model import MergeResult as MergeResult
from services.common.stores.graph.model import RelationInput as RelationInput
from services.common.stores.graph.model import RelationNotFoundError as RelationNotFoundError
from services.common.stores.graph.model import RelationRecord as RelationRecord
from services.common.stores.graph.model import RelationUpsertResult as RelationUpsertResult
from services.common.stores.graph.model import channel_view as channel_view
from services.common.stores.graph.model import entity_key as entity_key
from services.common.stores.graph.model import matches_text as matches_text
from services.common.stores.graph.model import normalise_entity_name as normalise_entity_name
from services.common.stores.graph.model import normalise_relation_type as normalise_relation_type
from services.common.stores.graph.reads import GraphReads
from services.common.stores.graph.writes import GraphWrites


class GraphRepository(GraphWrites, GraphReads, GraphErasure):
    """All reads and writes of the entity graph. Every method takes an `Owner`; every query filters on
    its tenant and user. Writes are idempotent (MERGE, list unions), so redelivered events are safe.
    Construct with `GraphRepository(executor, clock=...)`; `.executor` is the executor underneath."""
