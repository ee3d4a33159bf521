"""One contract for the graph repository, run on every executor: FalkorDB always (real server from the
session fixture), Neo4j when TIERMEM_TEST_NEO4J_URI (and _USER / _PASSWORD, optional _DATABASE) is set.

Tests isolate themselves by tenant-id prefix (Neo4j Community has a single database), and on FalkorDB
also by a fresh graph per test."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.cli.servers.falkordb_server import FalkorDBServer
from services.common.domain.owner import Owner
from services.common.stores.graph.falkordb import FalkorDBExecutor
from services.common.stores.graph.neo4j import Neo4jExecutor
from services.common.stores.graph.port import CypherExecutor
from services.common.stores.graph.repository import (
    EntityInput,
    EntityNotFoundError,
    EpisodeRef,
    GraphRepository,
    RelationInput,
    entity_key,
    normalise_entity_name,
)

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0


@dataclass
class GraphEnv:
    backend: str
    tenant_prefix: str
    _factory: Callable[[], CypherExecutor]
    _executors: list[CypherExecutor] = field(default_factory=list)

    def executor(self) -> CypherExecutor:
        """A new executor (its own connections) on the test's graph."""
        executor = self._factory()
        self._executors.append(executor)
        return executor

    def repository(self) -> GraphRepository:
        return GraphRepository(self.executor())

    def owner(self, tenant: str, user: str) -> Owner:
        return Owner(tenant_id=f"{self.tenant_prefix}_{tenant}", user_id=user)


@pytest.fixture(params=["falkordb", "neo4j"])
async def graph_env(request: pytest.FixtureRequest, falkordb_server: FalkorDBServer) -> AsyncIterator[GraphEnv]:
    factory: Callable[[], CypherExecutor]
    if request.param == "falkordb":
        graph_name = f"contract_{secrets.token_hex(6)}"

        def factory() -> CypherExecutor:
            return FalkorDBExecutor(falkordb_server.host, falkordb_server.port, falkordb_server.password, graph_name)

    else:
        uri = os.environ.get("TIERMEM_TEST_NEO4J_URI")
        if not uri:
            pytest.skip("Neo4j contract runs only when TIERMEM_TEST_NEO4J_URI (and _USER/_PASSWORD) is set")
        user = os.environ.get("TIERMEM_TEST_NEO4J_USER", "neo4j")
        password = os.environ.get("TIERMEM_TEST_NEO4J_PASSWORD", "")
        database = os.environ.get("TIERMEM_TEST_NEO4J_DATABASE", "neo4j")

        def factory() -> CypherExecutor:
            return Neo4jExecutor(uri, user, password, database)

    env = GraphEnv(backend=str(request.param), tenant_prefix=f"t{secrets.token_hex(5)}", _factory=factory)
    admin = env.executor()
    await admin.bootstrap()
    await admin.bootstrap()  # idempotent
    try:
        yield env
    finally:
        try:
            if isinstance(admin, FalkorDBExecutor):
                await admin.delete_graph()
            else:
                await admin.run(
                    "MATCH (n) WHERE n.tenant_id STARTS WITH $prefix DETACH DELETE n", {"prefix": env.tenant_prefix}
                )
        finally:
            for executor in env._executors:
                await executor.close()


# ----------------------------------------------------------------------------- helpers


async def snapshot(executor: CypherExecutor, tenant_prefix: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every node and edge of the test's tenants, in a stable order."""
    nodes = await executor.run(
        "MATCH (n) WHERE n.tenant_id STARTS WITH $prefix RETURN n AS node ORDER BY n.key", {"prefix": tenant_prefix}
    )
    edges = await executor.run(
        "MATCH (a)-[r]->(b) WHERE a.tenant_id STARTS WITH $prefix "
        "RETURN a.key AS source, type(r) AS label, r AS rel, b.key AS target",
        {"prefix": tenant_prefix},
    )
    edge_rows = sorted(edges, key=lambda row: (row["source"], row["label"], str(row["rel"].get("type")), row["target"]))
    return [row["node"] for row in nodes], edge_rows


async def related_triples(executor: CypherExecutor, tenant_prefix: str) -> list[tuple[str, str, str, str]]:
    """(source name, type, scope, target name) of every RELATED edge: duplicates show up twice."""
    rows = await executor.run(
        "MATCH (a:Entity)-[r:RELATED]->(b:Entity) WHERE r.tenant_id STARTS WITH $prefix "
        "RETURN a.name AS source, r.type AS type, r.scope AS scope, b.name AS target",
        {"prefix": tenant_prefix},
    )
    return sorted((row["source"], row["type"], row["scope"], row["target"]) for row in rows)


def episode(episode_id: str, offset_s: float = 0.0) -> EpisodeRef:
    return EpisodeRef(episode_id=episode_id, session_id=f"s-{episode_id}", occurred_at_ts=T0 + offset_s)


async def keys_by_name(repo: GraphRepository, owner: Owner, scope: Any, names: list[str]) -> dict[str, str]:
    results = await repo.upsert_entities(owner, scope, [EntityInput(name) for name in names])
    return {name: result.key for name, result in zip(names, results, strict=True)}


def assert_no_duplicate_or_self_loop_edges(triples: list[tuple[str, str, str, str]]) -> None:
    assert len(triples) == len(set(triples)), f"duplicate edges: {triples}"
    assert all(source != target for source, _, _, target in triples), f"self-loop: {triples}"


# ----------------------------------------------------------------------------- pure helpers


def test_normalise_entity_name_folds_spacing_case_and_punctuation() -> None:
    assert normalise_entity_name("온비서") == normalise_entity_name("온 비서") == "온비서"
    assert normalise_entity_name("DGIA") == normalise_entity_name("dgia") == normalise_entity_name("D.G.I.A.") == "dgia"
    assert normalise_entity_name("ＤＧＩＡ") == "dgia"  # full-width forms (NFKC)
    assert normalise_entity_name("C++") != normalise_entity_name("C")
    assert normalise_entity_name("C#") != normalise_entity_name("C")
    assert normalise_entity_name("  ...  ") == ""


def test_entity_keys_are_deterministic_and_scoped() -> None:
    alice, bob = Owner("acme", "alice"), Owner("acme", "bob")
    assert entity_key(alice, "personal", "D.G.I.A.") == entity_key(alice, "personal", "dgia")
    assert entity_key(alice, "personal", "DGIA") != entity_key(bob, "personal", "DGIA")
    assert entity_key(alice, "team", "DGIA") == entity_key(bob, "team", "DGIA")
    assert entity_key(alice, "team", "DGIA") != entity_key(alice, "org", "DGIA")
    assert entity_key(alice, "team", "DGIA") != entity_key(Owner("other", "alice"), "team", "DGIA")
    with pytest.raises(ValueError, match="nothing left"):
        entity_key(alice, "personal", "...")


# ----------------------------------------------------------------------------- contract


async def test_upsert_is_idempotent(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    entities = [
        EntityInput("Alice Kim", "person"),
        EntityInput("온비서", "project", aliases=["OnBiseo"]),
        EntityInput("온 비서"),  # same normalised name: folded into the node above
        EntityInput("DGIA", "organisation"),
        EntityInput("D.G.I.A."),
    ]
    first = await repo.upsert_entities(alice, "personal", entities, episode("e1"))
    assert [result.status for result in first] == ["created", "created", "created"]
    by_name = {result.name: result for result in first}
    assert set(by_name) == {"Alice Kim", "온비서", "DGIA"}
    assert set(by_name["온비서"].aliases) == {"온비서", "OnBiseo", "온 비서"}
    assert by_name["DGIA"].key == entity_key(alice, "personal", "d g i a")
    relations = [
        RelationInput(by_name["Alice Kim"].key, "works on", by_name["온비서"].key),
        RelationInput(by_name["온비서"].key, "OWNED-BY", by_name["DGIA"].key),
    ]
    relation_results = await repo.upsert_relations(alice, "personal", relations, episode("e1"))
    assert [(r.relation_type, r.created) for r in relation_results] == [("works_on", True), ("owned_by", True)]

    counts = await repo.count(alice)
    assert counts == {"nodes": 3, "edges": 2, "episodes": 1}
    before = await snapshot(graph_env.executor(), graph_env.tenant_prefix)

    # Replay (redelivered event): nothing changes, nothing reports a change.
    replay = await repo.upsert_entities(alice, "personal", entities, episode("e1"))
    assert [result.status for result in replay] == ["unchanged"] * 3
    replay_relations = await repo.upsert_relations(alice, "personal", relations, episode("e1"))
    assert not any(result.created or result.changed for result in replay_relations)
    assert await repo.count(alice) == counts
    assert await snapshot(graph_env.executor(), graph_env.tenant_prefix) == before

    # A new surface form or a new episode is a change, not a new node.
    changed = await repo.upsert_entities(alice, "personal", [EntityInput("dgia", aliases=["디지아"])], episode("e2"))
    assert changed[0].status == "changed"
    assert changed[0].key == by_name["DGIA"].key
    assert "디지아" in changed[0].aliases
    record = await repo.get_entity(alice, by_name["DGIA"].key)
    assert record is not None
    assert record.episode_ids == ("e1", "e2")
    assert record.entity_type == "organisation"
    assert await repo.count(alice) == {"nodes": 3, "edges": 2, "episodes": 2}


async def test_isolation_across_tenants_and_users(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    bob = graph_env.owner("acme", "bob")
    alice_elsewhere = graph_env.owner("globex", "alice")

    keys: dict[str, dict[str, str]] = {}
    for label, owner in (("alice", alice), ("bob", bob), ("alice_elsewhere", alice_elsewhere)):
        keys[label] = await keys_by_name(repo, owner, "personal", ["Secret Project", "Kim"])
        await repo.upsert_relations(
            owner, "personal", [RelationInput(keys[label]["Kim"], "works_on", keys[label]["Secret Project"])]
        )
    # Identical names, three different nodes.
    assert len({keys[label]["Secret Project"] for label in keys}) == 3

    team_alice = await keys_by_name(repo, alice, "team", ["Platform Team", "Roadmap"])
    team_bob = await keys_by_name(repo, bob, "team", ["Platform Team"])
    assert team_alice["Platform Team"] == team_bob["Platform Team"]  # shared within the tenant
    await repo.upsert_relations(
        alice, "team", [RelationInput(team_alice["Platform Team"], "owns", team_alice["Roadmap"])]
    )
    # Alice's private opinion about two shared nodes: a personal edge, invisible to Bob.
    await repo.upsert_relations(
        alice, "personal", [RelationInput(team_alice["Roadmap"], "blocked_by", team_alice["Platform Team"])]
    )
    globex_team = await keys_by_name(repo, alice_elsewhere, "team", ["Platform Team"])
    assert globex_team["Platform Team"] != team_alice["Platform Team"]

    for label, owner in (("alice", alice), ("bob", bob), ("alice_elsewhere", alice_elsewhere)):
        found = await repo.search_entities(owner, "secret project")
        assert [entity.key for entity in found] == [keys[label]["Secret Project"]]
        graph = await repo.neighbourhood(owner, name="Kim", hops=3)
        assert {entity.key for entity in graph.entities} == {keys[label]["Kim"], keys[label]["Secret Project"]}
        assert all(owner.user_id in relation.user_ids for relation in graph.relations)
        for other, other_keys in keys.items():
            if other != label:
                assert await repo.get_entity(owner, other_keys["Kim"]) is None

    team_for_alice = await repo.search_entities(alice, "platform")
    team_for_bob = await repo.search_entities(bob, "platform")
    team_for_globex = await repo.search_entities(alice_elsewhere, "platform")
    assert [e.key for e in team_for_alice] == [e.key for e in team_for_bob] == [team_alice["Platform Team"]]
    assert [e.key for e in team_for_globex] == [globex_team["Platform Team"]]

    alice_view = await repo.neighbourhood(alice, entity_key=team_alice["Roadmap"], hops=1)
    bob_view = await repo.neighbourhood(bob, entity_key=team_alice["Roadmap"], hops=1)
    assert {r.relation_type for r in alice_view.relations} == {"owns", "blocked_by"}
    assert {r.relation_type for r in bob_view.relations} == {"owns"}
    assert (await repo.neighbourhood(alice_elsewhere, entity_key=team_alice["Roadmap"])).entities == []

    # Writes cannot reach across either: another user's or tenant's key is simply not there.
    with pytest.raises(EntityNotFoundError):
        await repo.upsert_relations(bob, "personal", [RelationInput(keys["bob"]["Kim"], "knows", keys["alice"]["Kim"])])
    merge = await repo.merge_entities(bob, keys["bob"]["Kim"], [keys["alice"]["Kim"], keys["alice_elsewhere"]["Kim"]])
    assert merge.merged_keys == ()
    assert set(merge.not_found_keys) == {keys["alice"]["Kim"], keys["alice_elsewhere"]["Kim"]}
    with pytest.raises(EntityNotFoundError):
        await repo.merge_entities(bob, keys["alice"]["Kim"], [keys["bob"]["Kim"]])
    assert (await repo.get_entity(alice, keys["alice"]["Kim"])) is not None
    assert await repo.delete_episode(bob, "no-such-episode") == {
        "relations_deleted": 0,
        "relations_updated": 0,
        "entities_deleted": 0,
        "entities_updated": 0,
        "episodes_deleted": 0,
    }


async def _merge_fixture(repo: GraphRepository, owner: Owner) -> dict[str, str]:
    """DGIA with two duplicates, relations in and out of all three, and a relation between duplicates."""
    await repo.upsert_entities(owner, "team", [EntityInput("DGIA", "organisation")], episode("e1"))
    await repo.upsert_entities(owner, "team", [EntityInput("디지아", "organisation")], episode("e2"))
    await repo.upsert_entities(
        owner,
        "team",
        [EntityInput("Digital Government Innovation Agency", aliases=["DG Innovation Agency"])],
        episode("e3"),
    )
    names = ["DGIA", "디지아", "Digital Government Innovation Agency", "Alice", "Seoul", "온비서"]
    keys = await keys_by_name(repo, owner, "team", names)
    await repo.upsert_relations(
        owner,
        "team",
        [
            RelationInput(keys["Alice"], "works_at", keys["DGIA"], valid_from_ts=T0 + 10),
            RelationInput(keys["Alice"], "works_at", keys["디지아"], valid_from_ts=T0 + 5),
            RelationInput(keys["Digital Government Innovation Agency"], "located_in", keys["Seoul"]),
            RelationInput(keys["디지아"], "part_of", keys["Digital Government Innovation Agency"]),
            RelationInput(keys["DGIA"], "same_as", keys["디지아"]),
            RelationInput(keys["디지아"], "owns", keys["온비서"]),
            RelationInput(keys["온비서"], "funded_by", keys["Digital Government Innovation Agency"]),
        ],
        episode("e4"),
    )
    return keys


async def test_merge_keeps_aliases_and_repoints_every_relation(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    keys = await _merge_fixture(repo, alice)
    executor = graph_env.executor()
    before = await related_triples(executor, graph_env.tenant_prefix)

    duplicates = [keys["디지아"], keys["Digital Government Innovation Agency"]]
    result = await repo.merge_entities(alice, keys["DGIA"], duplicates)
    assert result.canonical_key == keys["DGIA"]
    assert set(result.merged_keys) == set(duplicates)
    assert set(result.aliases) == {"DGIA", "디지아", "Digital Government Innovation Agency", "DG Innovation Agency"}
    assert result.self_loops_dropped == 2  # 디지아 part_of DGIA-agency, DGIA same_as 디지아

    renamed = {"디지아": "DGIA", "Digital Government Innovation Agency": "DGIA"}
    expected = sorted(
        {
            (renamed.get(source, source), kind, scope, renamed.get(target, target))
            for source, kind, scope, target in before
            if renamed.get(source, source) != renamed.get(target, target)
        }
    )
    after = await related_triples(executor, graph_env.tenant_prefix)
    assert after == expected  # nothing lost, nothing doubled, no self-loop
    assert_no_duplicate_or_self_loop_edges(after)

    canonical = await repo.get_entity(alice, keys["DGIA"])
    assert canonical is not None
    assert set(canonical.episode_ids) == {"e1", "e2", "e3"}
    assert set(canonical.merged_keys) == set(duplicates)
    graph = await repo.neighbourhood(alice, entity_key=keys["DGIA"], hops=1)
    works_at = [r for r in graph.relations if r.relation_type == "works_at"]
    assert len(works_at) == 1
    assert works_at[0].valid_from_ts == T0 + 5  # the earliest of the two merged edges
    assert works_at[0].episode_ids == ("e4",)
    mentions = await executor.run(
        "MATCH (ep:Episode)-[:MENTIONS]->(n:Entity {key: $key}) RETURN ep.key AS episode ORDER BY episode",
        {"key": keys["DGIA"]},
    )
    assert [row["episode"] for row in mentions] == ["e1", "e2", "e3"]  # e4 only asserted relations
    for duplicate in duplicates:
        resolved = await repo.get_entity(alice, duplicate)
        assert resolved is not None
        assert resolved.key == keys["DGIA"]  # old keys lead to the survivor

    # A later mention of a merged name lands on the canonical node instead of re-creating the duplicate.
    again = await repo.upsert_entities(alice, "team", [EntityInput("디지아")], episode("e5"))
    assert again[0].key == keys["DGIA"]
    assert not again[0].created
    assert (await repo.count(alice))["nodes"] == 4


async def test_merge_twice_is_a_no_op(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    keys = await _merge_fixture(repo, alice)
    duplicates = [keys["디지아"], keys["Digital Government Innovation Agency"]]
    await repo.merge_entities(alice, keys["DGIA"], duplicates)
    before = await snapshot(graph_env.executor(), graph_env.tenant_prefix)

    second = await repo.merge_entities(alice, keys["DGIA"], duplicates)
    assert second.merged_keys == ()
    assert set(second.already_merged_keys) == set(duplicates)
    assert not second.changed
    # Naming a merged key as the canonical one resolves to the survivor: still a no-op.
    third = await repo.merge_entities(alice, keys["디지아"], [keys["DGIA"]])
    assert third.canonical_key == keys["DGIA"]
    assert third.merged_keys == ()
    assert await snapshot(graph_env.executor(), graph_env.tenant_prefix) == before


async def test_concurrent_merges_leave_a_consistent_graph(graph_env: GraphEnv) -> None:
    writer = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    keys = await _merge_fixture(writer, alice)
    extra = await keys_by_name(writer, alice, "team", ["DGIA Korea", "Busan"])
    await writer.upsert_relations(alice, "team", [RelationInput(extra["DGIA Korea"], "located_in", extra["Busan"])])
    before = await related_triples(graph_env.executor(), graph_env.tenant_prefix)

    # Two workers, two connections, overlapping duplicate sets.
    worker_a, worker_b = graph_env.repository(), graph_env.repository()
    await asyncio.gather(
        worker_a.merge_entities(alice, keys["DGIA"], [keys["디지아"], keys["Digital Government Innovation Agency"]]),
        worker_b.merge_entities(
            alice, keys["DGIA"], [keys["Digital Government Innovation Agency"], extra["DGIA Korea"]]
        ),
    )
    group = {keys["DGIA"], keys["디지아"], keys["Digital Government Innovation Agency"], extra["DGIA Korea"]}
    survivors = [e for e in await writer.list_entities(alice, "team") if e.key in group]
    assert [e.key for e in survivors] == [keys["DGIA"]]
    assert set(survivors[0].aliases) >= {"DGIA", "디지아", "Digital Government Innovation Agency", "DGIA Korea"}

    # Opposite choices of canonical node, at the same time: exactly one survives, with everything.
    await asyncio.gather(
        worker_a.merge_entities(alice, keys["Seoul"], [extra["Busan"]]),
        worker_b.merge_entities(alice, extra["Busan"], [keys["Seoul"]]),
    )
    remaining = {e.key for e in await writer.list_entities(alice, "team")} & {keys["Seoul"], extra["Busan"]}
    assert len(remaining) == 1
    survivor = await writer.get_entity(alice, remaining.pop())
    assert survivor is not None
    assert {"Seoul", "Busan"} <= set(survivor.aliases)

    folded = {
        "디지아": "DGIA",
        "Digital Government Innovation Agency": "DGIA",
        "DGIA Korea": "DGIA",
        "Busan": survivor.name,
        "Seoul": survivor.name,
    }
    expected = sorted(
        {
            (folded.get(s, s), kind, scope, folded.get(t, t))
            for s, kind, scope, t in before
            if folded.get(s, s) != folded.get(t, t)
        }
    )
    after = await related_triples(graph_env.executor(), graph_env.tenant_prefix)
    assert after == expected
    assert_no_duplicate_or_self_loop_edges(after)
    dangling = await graph_env.executor().run(
        "MATCH (n:Entity) WHERE n.tenant_id STARTS WITH $prefix AND size(n.user_ids) = 0 RETURN count(n) AS n",
        {"prefix": graph_env.tenant_prefix},
    )
    assert dangling[0]["n"] == 0


async def test_two_hop_query_finds_a_persons_projects(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    await repo.upsert_entities(
        alice,
        "team",
        [
            EntityInput("Jiwoo Park", "person"),
            EntityInput("Minho Lee", "person"),
            EntityInput("온비서", "project"),
            EntityInput("Recall API", "project"),
            EntityInput("Billing", "project"),
            EntityInput("Platform Team", "organisation"),
        ],
        episode("e1"),
    )
    keys = await keys_by_name(
        repo, alice, "team", ["Jiwoo Park", "Minho Lee", "온비서", "Recall API", "Billing", "Platform Team"]
    )
    await repo.upsert_relations(
        alice,
        "team",
        [
            RelationInput(keys["Jiwoo Park"], "works_on", keys["온비서"]),
            RelationInput(keys["Jiwoo Park"], "member_of", keys["Platform Team"]),
            RelationInput(keys["Platform Team"], "owns", keys["Recall API"]),
            RelationInput(keys["Minho Lee"], "works_on", keys["Billing"]),
        ],
        episode("e1"),
    )
    await repo.close_relation(
        alice, "team", keys["Jiwoo Park"], "works_on", keys["온비서"], valid_to_ts=T0 + 100, episode=episode("e2", 100)
    )

    def projects(result: Any) -> set[str]:
        return {entity.name for entity in result.entities if entity.entity_type == "project"}

    two_hops = await repo.neighbourhood(alice, name="jiwoo park", hops=2)
    assert projects(two_hops) == {"온비서", "Recall API"}
    closed = [r for r in two_hops.relations if r.relation_type == "works_on"]
    assert len(closed) == 1
    assert closed[0].valid_to_ts == T0 + 100
    assert not closed[0].is_current
    assert closed[0].episode_ids == ("e1", "e2")  # provenance: asserted in e1, ended in e2
    assert projects(await repo.neighbourhood(alice, name="Jiwoo Park", hops=1)) == {"온비서"}
    assert projects(await repo.neighbourhood(alice, name="Jiwoo Park", hops=2, current_only=True)) == {"Recall API"}
    assert projects(await repo.neighbourhood(alice, entity_key=keys["Minho Lee"], hops=2)) == {"Billing"}
    with pytest.raises(ValueError, match="hops"):
        await repo.neighbourhood(alice, name="Jiwoo Park", hops=4)


async def test_closing_and_reasserting_a_relation_survives_replays(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    keys = await keys_by_name(repo, alice, "personal", ["Alice", "온비서"])
    works_on = [RelationInput(keys["Alice"], "works_on", keys["온비서"])]
    await repo.upsert_relations(alice, "personal", works_on, episode("e1", 0))
    assert await repo.close_relation(
        alice, "personal", keys["Alice"], "works_on", keys["온비서"], episode=episode("e2", 50)
    )
    await repo.upsert_relations(alice, "personal", works_on, episode("e3", 80))  # works on it again
    # Redelivered close from e2 and assertion from e1: the newer assertion stands.
    assert not await repo.close_relation(
        alice, "personal", keys["Alice"], "works_on", keys["온비서"], episode=episode("e2", 50)
    )
    await repo.upsert_relations(alice, "personal", works_on, episode("e1", 0))
    relation = (await repo.neighbourhood(alice, entity_key=keys["Alice"], hops=1)).relations[0]
    assert relation.is_current
    assert relation.valid_from_ts == T0
    assert relation.last_asserted_ts == T0 + 80


async def test_delete_user_data_erases_one_user_and_keeps_the_other(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    bob = graph_env.owner("acme", "bob")
    executor = graph_env.executor()

    alice_personal = await keys_by_name(repo, alice, "personal", ["Alice", "Side Project"])
    await repo.upsert_entities(alice, "personal", [EntityInput("Side Project", aliases=["사이드"])], episode("a1"))
    await repo.upsert_relations(
        alice,
        "personal",
        [RelationInput(alice_personal["Alice"], "works_on", alice_personal["Side Project"])],
        episode("a1"),
    )
    # Shared team entity: both contribute, with their own surface forms and episodes.
    await repo.upsert_entities(alice, "team", [EntityInput("Platform Team", aliases=["플랫폼팀"])], episode("a2"))
    await repo.upsert_entities(bob, "team", [EntityInput("platform team", aliases=["Plat Team"])], episode("b1"))
    only_alice_team = await keys_by_name(repo, alice, "team", ["Alice Only Guild"])
    await repo.upsert_entities(bob, "team", [EntityInput("Recall API", "project")], episode("b1"))
    team = {name: entity_key(bob, "team", name) for name in ("Platform Team", "Recall API")}
    await repo.upsert_relations(
        bob, "team", [RelationInput(team["Platform Team"], "owns", team["Recall API"])], episode("b1")
    )
    await repo.upsert_relations(
        alice, "team", [RelationInput(team["Platform Team"], "owns", team["Recall API"])], episode("a2")
    )
    # Alice relates her personal node to the team (an edge only she supports).
    await repo.upsert_relations(
        alice, "personal", [RelationInput(alice_personal["Alice"], "member_of", team["Platform Team"])], episode("a2")
    )
    bob_before = await repo.count(bob)
    assert (await repo.count(alice))["nodes"] >= 4

    removed = await repo.delete_user_data(alice)
    assert removed["episodes_deleted"] == 2
    assert removed["entities_deleted"] == 3  # Alice, Side Project, Alice Only Guild
    assert await repo.count(alice) == {"nodes": 0, "edges": 0, "episodes": 0}
    assert await repo.count(bob) == bob_before

    # No trace of Alice anywhere in the tenant: not her id, not her episodes, not her surface forms.
    nodes, edges = await snapshot(executor, graph_env.tenant_prefix)
    alice_only_strings = {"alice", "a1", "a2", "플랫폼팀", "사이드", "Side Project", "Alice Only Guild"}
    for item in [*nodes, *(edge["rel"] for edge in edges)]:
        text = repr(sorted(item.items()))
        for needle in alice_only_strings:
            assert f"'{needle}'" not in text, (needle, item)
            assert f":{needle}'" not in text, (needle, item)
        assert not any(str(source).startswith("alice:") for source in item.get("alias_sources", []))
    assert only_alice_team["Alice Only Guild"] not in {node["key"] for node in nodes}

    shared = await repo.get_entity(bob, team["Platform Team"])
    assert shared is not None
    assert shared.user_ids == ("bob",)
    assert shared.episode_ids == ("b1",)
    assert set(shared.aliases) == {"platform team", "Plat Team"}
    assert shared.name == "platform team"  # Alice's spelling went with her
    owns = await repo.neighbourhood(bob, entity_key=team["Platform Team"], hops=1)
    assert [(r.relation_type, r.user_ids, r.episode_ids) for r in owns.relations] == [("owns", ("bob",), ("b1",))]

    # Erasing again finds nothing.
    again = await repo.delete_user_data(alice)
    assert set(again.values()) == {0}
    assert await repo.count(bob) == bob_before


async def test_delete_episode_removes_only_what_that_episode_supports(graph_env: GraphEnv) -> None:
    repo = graph_env.repository()
    alice = graph_env.owner("acme", "alice")
    only_e1 = await repo.upsert_entities(alice, "personal", [EntityInput("Only In E1")], episode("e1"))
    both = await repo.upsert_entities(alice, "personal", [EntityInput("In Both")], episode("e1"))
    await repo.upsert_entities(alice, "personal", [EntityInput("In Both")], episode("e2"))
    await repo.upsert_relations(
        alice, "personal", [RelationInput(both[0].key, "mentions", only_e1[0].key)], episode("e1")
    )
    removed = await repo.delete_episode(alice, "e1")
    assert removed["episodes_deleted"] == 1
    assert removed["entities_deleted"] == 1
    assert removed["relations_deleted"] == 1
    assert await repo.get_entity(alice, only_e1[0].key) is None
    kept = await repo.get_entity(alice, both[0].key)
    assert kept is not None
    assert kept.episode_ids == ("e2",)
    assert await repo.count(alice) == {"nodes": 1, "edges": 0, "episodes": 1}
    assert set((await repo.delete_episode(alice, "e1")).values()) == {0}
