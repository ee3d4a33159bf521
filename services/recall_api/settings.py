"""Settings of the recall-api. Environment variables use the shared `TIERMEM_` prefix, e.g.
`TIERMEM_L0_MIN_SCORE=0.35`."""

from __future__ import annotations

from pydantic import Field, SecretStr

from services.common.runtime.settings import TierMemSettings


class RecallApiSettings(TierMemSettings):
    """Recall policy knobs. Defaults follow DESIGN.md §2: keyword-heavy and thresholded for L0
    (every turn, latency-critical, nothing is better than something wrong), vector-heavy for L1."""

    # ---- L0 auto-inject ------------------------------------------------------------------------
    l0_keyword_weight: float = Field(default=0.7, ge=0, le=1, description="L0 hybrid weight of keyword search.")
    l0_dense_weight: float = Field(default=0.3, ge=0, le=1, description="L0 hybrid weight of vector search.")
    l0_min_score: float = Field(
        default=0.3, ge=0, le=1, description="L0 drops every hit whose fused relevance is below this."
    )
    l0_previous_user_turns: int = Field(
        default=2, ge=0, le=10, description="Previous user turns added to the L0 query (resolves pronouns)."
    )
    l0_query_max_codepoints: int = Field(
        default=300, ge=20, description="Longest L0 query in code points; the newest end is kept."
    )
    l0_default_max_entries: int = Field(default=3, ge=1, le=20, description="Entries injected when not requested.")
    l0_default_token_budget: int = Field(default=300, ge=1, description="Token budget when not requested.")

    # ---- L1 search -----------------------------------------------------------------------------
    l1_keyword_weight: float = Field(default=0.3, ge=0, le=1, description="L1 hybrid weight of keyword search.")
    l1_dense_weight: float = Field(default=0.7, ge=0, le=1, description="L1 hybrid weight of vector search.")
    l1_min_score: float = Field(
        default=0.25, ge=0, le=1, description="L1 drops hits under this fused relevance (an empty answer is honest)."
    )

    # ---- ranking -------------------------------------------------------------------------------
    fetch_factor: int = Field(default=2, ge=1, le=10, description="Fetch this many times the entries wanted.")
    episode_half_life_days: float = Field(
        default=180.0,
        gt=0,
        description=(
            "Recency half-life of episodes for ranking (the 'medium' volatility half-life). Episodes expire "
            "at their TTL anyway; decay only orders similarly relevant ones."
        ),
    )

    episode_recency_weight: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Largest share of an episode's relevance that age can take away (0: recency ignored).",
    )

    # ---- L1 expand / memory_recall -------------------------------------------------------------
    expand_max_messages: int = Field(
        default=500, ge=1, description="Most source messages memory_expand returns for one episode."
    )
    facts_default_token_budget: int = Field(default=500, ge=1, description="memory_recall budget when not requested.")
    facts_scan_limit: int = Field(default=2000, ge=1, description="Most facts memory_recall reads for one user.")

    # ---- graph ---------------------------------------------------------------------------------
    graph_default_limit: int = Field(default=20, ge=1, le=200)

    # ---- background work, MCP, health ----------------------------------------------------------
    recall_count_queue_size: int = Field(
        default=10_000, ge=1, description="Pending recall-count updates; beyond this they are dropped with a log."
    )
    mcp_path: str = Field(default="/mcp", description="Where the MCP streamable HTTP endpoint is mounted.")
    mcp_allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        description="Host headers the MCP endpoint accepts (DNS-rebinding protection); empty disables the check.",
    )
    readiness_timeout_s: float = Field(default=2.0, gt=0, description="Per-dependency timeout of /readyz.")

    # ---- HTTP limits and write endpoints -------------------------------------------------------
    max_request_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description=(
            "Largest request body of /v1 and MCP, checked before the body is parsed (413 beyond). It must "
            "leave room for a batch of sessions; each session is also held to the ingest size limits."
        ),
    )
    event_status_scan_limit: int = Field(
        default=10_000, ge=1, description="Most stream messages GET /v1/events/{id} reads per subject filter."
    )
    mcp_api_key: SecretStr | None = Field(
        default=None, description="API key the stdio MCP server (`tiermem mcp`) acts with; decides the tenant."
    )
    mcp_user_id: str | None = Field(
        default=None, description="Pins the stdio MCP server to one user (tools then need no user_id)."
    )
