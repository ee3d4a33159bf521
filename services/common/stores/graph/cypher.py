"""Cypher fragments every graph query shares: the visibility rule of the data model (see `model`) and
list helpers FalkorDB and Neo4j both understand."""

from __future__ import annotations


def visible(var: str) -> str:
    """Owner may see node `var`: same tenant, and shared or their own personal node."""
    return f"({var}.tenant_id = $tenant_id AND ({var}.scope <> 'personal' OR $user_id IN {var}.user_ids))"


def visible_edge(var: str) -> str:
    """Owner may see edge `var` (endpoints must be checked with `visible` as well)."""
    return f"({var}.tenant_id = $tenant_id AND ({var}.scope <> 'personal' OR $user_id IN {var}.user_ids))"


def distinct(expression: str, acc: str = "acc", item: str = "item") -> str:
    """Cypher: `expression` (a list) without repeats, first occurrence kept."""
    return f"reduce({acc} = [], {item} IN {expression} | CASE WHEN {item} IN {acc} THEN {acc} ELSE {acc} + {item} END)"


def union(existing: str, extra: str) -> str:
    """Cypher: `existing` followed by the items of `extra` it lacks (no repeats if neither has any)."""
    return f"reduce(acc = {existing}, item IN {extra} | CASE WHEN item IN acc THEN acc ELSE acc + item END)"


def concat_lists(list_of_nodes: str, attribute: str) -> str:
    """Cypher: the `attribute` lists of every node in `list_of_nodes`, one after the other (repeats kept)."""
    return f"reduce(all_items = [], d IN {list_of_nodes} | all_items + coalesce(d.{attribute}, []))"
