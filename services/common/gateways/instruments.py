"""Prometheus instruments of the gateways (on the process's default registry, which every health
port and the recall API's /metrics expose). Labels are bounded: purpose, model, kind; never a
tenant or a user (cardinality, and privacy)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LLM_TOKENS = Counter(
    "tiermem_llm_tokens",
    "LLM tokens used, by purpose, model and direction (input = prompt, output = completion).",
    ["purpose", "model", "direction"],
)
LLM_COST_USD = Counter("tiermem_llm_cost_usd", "LLM cost in US dollars (litellm's price map).", ["purpose", "model"])
LLM_CALLS = Counter("tiermem_llm_calls", "LLM calls (all attempts of one call count once).", ["purpose", "outcome"])
LLM_SECONDS = Histogram("tiermem_llm_seconds", "Duration of one LLM call, retries included.", ["purpose"])
EMBEDDING_SECONDS = Histogram(
    "tiermem_embedding_seconds",
    "Duration of one embedding call (a passage batch or one query).",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
