"""Settings of the recall-api. Environment variables use the shared `TIERMEM_` prefix, e.g.
`TIERMEM_L0_MIN_SCORE=0.35`."""

from __future__ import annotations

from typing import Literal

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
    # Two, not more: L0 injects unasked into every turn, and an item ranked third after one per session
    # and one per content was seldom from a session holding the answer, while it took prompt room and
    # misled as often as it helped (docs/evaluation.md, "What L0 injects"). A caller that wants more asks.
    l0_default_max_entries: int = Field(default=2, ge=1, le=20, description="Entries injected when not requested.")
    l0_default_token_budget: int = Field(default=300, ge=1, description="Token budget when not requested.")
    l0_embedding_deadline_ms: float = Field(
        default=1000,
        gt=0,
        description="L0 waits this long (from the request's start) for the query embedding, then answers from "
        "keyword search alone, flagged degraded (services/recall_api/l0/deadline.py).",
    )
    # The model weighs the rules' own verdict with the signals they cut on alone, so it can keep what one
    # hard cut would drop and drop what every cut lets through: L0 acts unasked, and a wrong item costs the
    # turn more than a missing one.
    l0_decision: Literal["model", "rules"] = Field(
        default="model",
        description=(
            "How L0 decides what to inject: rules, the hand rules below (relative margin, dense and keyword "
            "floors, subject and detail checks); model, a logistic model over the candidate's scores, wording "
            "coverage, subject and the rules' own verdict (coefficients shipped with the package, "
            "services/recall_api/l0/decision.py). One per session, the entry limit and the token budget apply "
            "to both."
        ),
    )
    # The L0 gate (services/recall_api/l0/gate.py, l0/subject.py): rules that move the precision-recall
    # frontier rather than the threshold along it. Measured on LoCoMo (dev subset) in the issue 17 note.
    l0_relative_margin: float = Field(
        default=0.03,
        ge=0,
        le=1,
        description="L0 leaves out items more than this below the query's best relevance (1: off).",
    )
    l0_min_dense: float = Field(
        default=0.0, ge=0, le=1, description="Least dense part (of the fused relevance) an L0 item needs (0: off)."
    )
    l0_min_dense_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Least dense part an L0 item needs as a share of the best dense part among the candidates (0: off)."
        ),
    )
    l0_min_keyword: float = Field(
        default=0.0, ge=0, le=1, description="Least keyword part (of the fused relevance) an L0 item needs (0: off)."
    )
    l0_one_per_session: bool = Field(
        default=True, description="L0 injects at most one item per session, a fact before its session's episode."
    )
    l0_subject_attribution: bool = Field(
        default=True,
        description="L0 leaves out memories about another known speaker than the one the message asks about.",
    )
    l0_detail_max_dense: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description=(
            "L0 leaves out a memory that shares the message's named topic but none of the details a value "
            "question (what, when, who; 뭐, 언제, 누구) asks about, unless its dense part reaches this (0: check "
            "off; 1: the words decide, as the whole memory's dense part is as high for the topic as for the detail)."
        ),
    )

    l0_value_check: bool = Field(
        default=True,
        description=(
            "L0 leaves out a memory that states no value of the kind the question asks for: no number for "
            "how many / how much / how old / which version (몇, 얼마), no clock time for what time (몇 시), "
            "besides the values the question names itself."
        ),
    )

    # ---- L1 search -----------------------------------------------------------------------------
    l1_keyword_weight: float = Field(default=0.3, ge=0, le=1, description="L1 hybrid weight of keyword search.")
    l1_dense_weight: float = Field(default=0.7, ge=0, le=1, description="L1 hybrid weight of vector search.")
    # L1 is the agent's explicit search for `limit` results, ranked with their scores: its floor only
    # removes what shares neither words nor meaning with the query. At 0.25 it cut the list short of
    # `limit` for ~7% of LoCoMo questions whose evidence sat at 0.15-0.25 (recall@5 0.931 vs 0.957 at
    # 0.15); the "nothing relevant" decision belongs to L0's gate and subject check, which inject unasked.
    # A passage of many short messages embeds as their blend; its turn points (written by the
    # summarizer, TIERMEM_PASSAGE_TURN_POINTS) let a question about one of them meet it. L0 leaves
    # them out: its decision was calibrated on passage scores alone.
    l1_passage_turns: bool = Field(
        default=True,
        description="L1 counts a passage as close as its closest turn point (stored by the summarizer).",
    )
    l1_min_score: float = Field(
        default=0.15, ge=0, le=1, description="L1 drops hits under this fused relevance (an empty answer is honest)."
    )
    # How L1 weighs a session's evidence (services/recall_api/retrieval/session_evidence.py). The
    # summary and passage collections score on different scales, so "rrf" compares ranks; see
    # docs/evaluation.md for the variants measured and the pick.
    l1_evidence: Literal["max", "rrf", "support"] = Field(
        default="max",
        description=(
            "L1 ranks an episode by its best hit ('max'), by rank fusion of its summary, passage and fact "
            "rankings ('rrf': the hybrid scores are handed out in the fused order), or by its best hit plus "
            "bounded shares of its next-best hit and best fact ('support')."
        ),
    )
    l1_rrf_k: float = Field(default=60.0, gt=0, le=1000, description="Damping constant of L1's rank fusion.")
    l1_summary_weight: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Weight (in rank fusion) of the episode-summary ranking; the passage ranking weighs 1.",
    )
    l1_second_passage_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Weight of a session's second-best passage (rrf) or next-best hit (support): two matching "
            "passages beat one."
        ),
    )
    l1_fact_vote_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Weight (rrf, support) of the best matching fact of a session: a fact votes for the session it "
            "came from. When only episodes are asked for, facts are then searched too (one more store read)."
        ),
    )
    l1_time_boost: float = Field(
        default=0.0,
        ge=0,
        le=0.5,
        description=(
            "Relevance an episode gains when its session time falls in a time the query names ('in May', "
            "'last Saturday', '5월', '지난주'; relative times resolved against the request time; 0: off)."
        ),
    )
    l1_alias_expansion: bool = Field(
        default=True,
        description=(
            "L1 adds the other names (graph aliases) of entities the query names to its keyword query; skipped "
            "when the graph does not answer within l1_alias_timeout_ms."
        ),
    )
    l1_alias_timeout_ms: float = Field(
        default=100.0, gt=0, le=5000, description="Longest L1 waits for the graph's alias lookup."
    )

    # ---- ranking -------------------------------------------------------------------------------
    fetch_factor: int = Field(default=2, ge=1, le=10, description="Fetch this many times the entries wanted.")
    # Each branch fetches `2 × fetch` hits by similarity alone, then ranking reorders them by age,
    # importance and the times a query names: with shallow branches a recent memory that a limit-20 search
    # ranks first, behind older and closer ones, is not fetched at limit 1 or 3, and a limit-k answer is
    # not the start of the limit-20 one (tests/integration/test_l1_depth.py). So L1 fetches at least this
    # many: the answers of every limit up to 20 are prefixes of one ranking. L0 keeps `fetch_factor`
    # alone: it runs every turn within 1.3x of the query embedding, and a deeper L0 was not measured.
    l1_min_fetch: int = Field(
        default=40,
        ge=1,
        le=400,
        description="L1 fetches at least this many hits per collection before ranking, whatever its limit.",
    )
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
    importance_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Largest share of a memory's relevance that low importance can take away, in L0 and L1 ranking "
            "(0: importance ignored, exactly the order without it). 0 by default: on the LoCoMo dev subset "
            "(both chat forms) 0.1 and 0.2 cost L1 recall@5 (0.952 → 0.948 / 0.944) and L0 recall while "
            "gaining top-1 hits; LoCoMo asks about chit-chat as much as decisions. Env TIERMEM_IMPORTANCE_WEIGHT."
        ),
    )

    # ---- L1 expand / memory_recall -------------------------------------------------------------
    expand_max_messages: int = Field(
        default=500, ge=1, description="Most source messages memory_expand returns for one episode."
    )
    facts_default_token_budget: int = Field(default=500, ge=1, description="memory_recall budget when not requested.")
    facts_scan_limit: int = Field(default=2000, ge=1, description="Most facts memory_recall reads for one user.")

    # ---- graph ---------------------------------------------------------------------------------
    graph_default_limit: int = Field(
        default=20, ge=1, le=200, description="Most relations a graph search returns when the request gives no limit."
    )

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
    open_session_idle_s: float = Field(
        default=1800.0,
        gt=0,
        description="A per-turn session (POST /v1/users/{user_id}/sessions/{session_id}/messages) with no new turn "
        "for this long is completed, as by its /end.",
    )
    open_session_sweep_s: float = Field(
        default=30.0,
        gt=0,
        description="How often the recall API looks for idle per-turn sessions to complete.",
    )
    open_session_closed_keep_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="How long a completed per-turn session's record (its event id, no turns) is kept, so a "
        "retried /end is answered as a duplicate.",
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

    # ---- authentication and exposure ------------------------------------------------------------
    # services/recall_api/http/throttle.py: only wrong keys spend the budget; behind a proxy, set uvicorn's
    # FORWARDED_ALLOW_IPS to the proxy's addresses, or every client shares the proxy's budget.
    auth_failures_per_minute: float = Field(
        default=10.0,
        gt=0,
        description="Wrong API keys (Bearer or /ui login) a client address may present per minute once its "
        "burst is spent; beyond, a key that has not worked from that address gets 429 with Retry-After unchecked.",
    )
    auth_failure_burst: int = Field(
        default=20, ge=1, description="Wrong API keys a client address may present at once before it is throttled."
    )
    auth_throttle_max_clients: int = Field(
        default=10_000,
        ge=1,
        description="Client addresses whose wrong keys are remembered, and as many address/key pairs that worked "
        "(oldest dropped first).",
    )
    metrics_require_key: bool = Field(
        default=False,
        description="Put /metrics behind the API key (Bearer). Off by default so Prometheus can scrape it; it "
        "carries counts and latencies, never a tenant, user or memory text.",
    )
    docs_require_key: bool = Field(
        default=False,
        description="Put /docs, /redoc and /openapi.json behind the API key (Bearer); /docs in a browser then "
        "cannot load the schema.",
    )
    body_read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Time a request has, from its arrival, to send its whole body; beyond it the answer is 408.",
    )
    ui_max_sessions: int = Field(
        default=10_000,
        ge=1,
        description="Live memory-browser sessions kept per process (logout ends one; past this the oldest ends).",
    )
