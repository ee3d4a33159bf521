"""Settings shared by every service. Built in app factories and passed down; nothing reads the
environment at import time. Environment variables use the `TIERMEM_` prefix and `__` for nesting,
e.g. `TIERMEM_NATS__URL`, `TIERMEM_LLM__MODEL`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from contracts import SizeLimits
from services.common.gateways.embedding_config import EmbeddingConfig


class NatsSettings(BaseModel):
    url: str = Field(default="nats://127.0.0.1:4222", description="NATS server URL(s), comma separated.")
    token: SecretStr | None = Field(default=None, description="Auth token, when the server wants one.")
    subject_root: str = Field(default="memory", description="First token of every subject.")
    binary: Path | None = Field(default=None, description="nats-server binary for the embedded stack.")
    session_max_age_days: float = Field(default=365, description="How long the raw session archive is kept.")
    duplicate_window_s: float = Field(default=3600, description="JetStream de-duplication window.")
    replicas: int = Field(default=1, ge=1, le=5, description="Stream replicas (R3 in production).")
    ack_wait_s: float = Field(default=120, description="Seconds before an unacked delivery is redelivered.")
    max_deliver: int = Field(default=5, ge=1, description="Deliveries before a message is dead-lettered.")
    retry_delays_s: list[float] = Field(
        default_factory=lambda: [2.0, 10.0, 60.0, 300.0],
        description=(
            "The one retry schedule: delay before redelivering a message whose handler raised, one per "
            "redelivery (the last repeats). With max_deliver=5 a failing message is retried for 372 s, then "
            "dead-lettered (`tiermem dlq replay` brings it back). A crashed or hung worker's message is "
            "redelivered after ack_wait_s instead."
        ),
    )
    fetch_batch: int = Field(
        default=1,
        ge=1,
        description=(
            "Messages fetched per pull request and handled concurrently. 1 keeps each consumer in stream "
            "order (and avoids a FastStream/nats-py timeout mismatch on partial batch fetches)."
        ),
    )
    max_ack_pending: int = Field(default=64, ge=1, description="Unacked messages in flight per consumer.")
    connect_timeout_s: float = Field(default=5.0, description="Seconds one connection attempt to NATS may take.")


class VectorSettings(BaseModel):
    backend: Literal["edge", "server"] = Field(default="edge", description="Qdrant Edge in-process, or a server.")
    path: Path | None = Field(default=None, description="Edge data dir (default <data_dir>/qdrant-edge).")
    url: str | None = Field(default=None, description="Qdrant server URL for backend=server.")
    api_key: SecretStr | None = Field(default=None, description="Qdrant server API key (backend=server).")
    index_builds: Literal["never", "background", "inline"] = Field(
        default="never",
        description="Edge HNSW builds: never (per-owner searches scan; nothing stalls a turn), background (a child "
        "process builds a copy, swapped in: a short pause to load it) or inline (freezes the process while it builds). "
        "Deleted points are compacted in every mode once 20% are deleted: in a child process for never (no HNSW) and "
        "background.",
    )
    index_build_threshold: int = Field(
        default=20_000, ge=1, description="Edge: points written since the last HNSW build that start the next one."
    )
    dense_window: int | None = Field(
        default=5_000,
        ge=1,
        description="Edge: an owner with more points than this in a collection (a power user) has the vector half of "
        "each search run over their most recent this-many points; keywords still search all. null: always exhaustive.",
    )
    window_vectors: bool = Field(
        default=True,
        description="Edge: keep the dense windows of the most recently searched power users in memory as matrices "
        "(at most 8, ~1.5 KB a point at 384 dimensions) and let them shortlist the points Edge scores; the same "
        "answers as without (a shortlist that cannot prove it falls back to Edge's search of the window).",
    )


class GraphSettings(BaseModel):
    backend: Literal["falkordb", "neo4j"] = Field(
        default="falkordb", description="FalkorDB (Redis protocol) or Neo4j 5 (Bolt)."
    )
    host: str = Field(default="127.0.0.1", description="FalkorDB host.")
    port: int = Field(default=6379, description="FalkorDB port.")
    password: SecretStr | None = Field(default=None, description="FalkorDB password.")
    graph_name: str = Field(default="tiermem", description="FalkorDB graph key that holds the entity graph.")
    neo4j_uri: str = Field(default="bolt://127.0.0.1:7687", description="Neo4j Bolt URI for backend=neo4j.")
    neo4j_user: str = Field(default="neo4j", description="Neo4j user.")
    neo4j_password: SecretStr | None = Field(default=None, description="Neo4j password.")
    neo4j_database: str = Field(default="neo4j", description="Neo4j database name.")


class LlmSettings(BaseModel):
    model: str | None = Field(default=None, description="litellm model name; unset = offline heuristic mode.")
    api_base: str | None = Field(default=None, description="Provider base URL (OpenAI-compatible servers).")
    api_key: SecretStr | None = Field(default=None, description="Provider API key.")
    timeout_s: float = Field(default=60.0, description="Timeout of one attempt.")
    max_attempts: int = Field(default=3, description="Attempts per call, the first included.")
    total_budget_s: float = Field(
        default=180.0, description="No attempt starts after this long; attempts are cut to what is left."
    )
    input_cost_per_token: float | None = Field(
        default=None, description="USD per prompt token; when set (or the output cost is) it wins over litellm's map."
    )
    output_cost_per_token: float | None = Field(default=None, description="USD per completion token.")
    progress_interval_s: float = Field(
        default=5.0, description="How often a long LLM call tells JetStream the message is still in progress."
    )


class TelemetrySettings(BaseModel):
    otlp_endpoint: str | None = Field(default=None, description="OTLP/HTTP endpoint; unset = tracing export off.")
    service_name: str = Field(default="tiermem", description="Prefix of the OpenTelemetry service.name.")
    record_owner_ids: bool = Field(
        default=False,
        description="TIERMEM_TELEMETRY__RECORD_OWNER_IDS: keep tenant and user ids in NATS span names and attributes "
        "(off: subjects appear as templates, memory.session.completed.v1.{tenant}.{user}).",
    )
    tenant_counts: bool = Field(
        default=False,
        description="TIERMEM_TELEMETRY__TENANT_COUNTS: also export stored episodes/facts/entities per tenant "
        "(tiermem_stored_items_by_tenant); totals are always exported.",
    )
    store_counts_interval_s: float = Field(
        default=60.0, ge=0, description="How often the recall API's process counts the stores; 0 = never."
    )


class TierMemSettings(BaseSettings):
    """Settings of one tiermem process."""

    # An empty variable means unset (compose's `${VAR:-}`, a Secret key left empty), never "".
    model_config = SettingsConfigDict(
        env_prefix="TIERMEM_", env_nested_delimiter="__", extra="ignore", validate_default=True, env_ignore_empty=True
    )

    data_dir: Path = Field(default=Path(".tiermem"), description="Embedded stack data and address file.")
    nats: NatsSettings = Field(default_factory=NatsSettings)
    vector: VectorSettings = Field(default_factory=VectorSettings)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    # Plain strings: an unknown value falls back to the default with a warning (runtime/logs.py)
    # rather than stopping every command at start-up.
    log_level: str = Field(default="WARNING", description="TIERMEM_LOG_LEVEL: level of the process's logs.")
    log_format: str = Field(
        default="text", description="TIERMEM_LOG_FORMAT: text for a console, json (one object a line, with trace ids)."
    )
    log_content: bool = Field(
        default=False,
        description="TIERMEM_LOG_CONTENT: memory, prompt and model text in log lines (off: redacted, with its length).",
    )
    limits: SizeLimits = Field(default_factory=SizeLimits)
    episode_ttl_days: float = Field(
        default=365,
        description="Episodes expire this long after the session (or after it reached tiermem, for an import).",
    )
    http_host: str = Field(default="127.0.0.1", description="Bind address of the recall HTTP API.")
    http_port: int = Field(default=8080, description="Port of the recall HTTP API.")
    health_host: str = Field(default="127.0.0.1", description="Bind address of a consumer's health/metrics port.")
    health_port: int | None = Field(
        default=None, description="Consumer health/metrics port (/healthz, /readyz, /metrics); unset = off."
    )
    health_timeout_s: float = Field(default=5.0, gt=0, description="Per-dependency timeout of a consumer's /readyz.")
    api_keys: dict[str, str] = Field(default_factory=dict, description="API key → tenant id for the recall API.")
    operator_tenants: list[str] = Field(
        default_factory=list,
        description=(
            "Tenants whose keys may see whole-stack figures (the memory browser's Pipeline page: lag, dead "
            "letters and LLM cost summed over every tenant). Empty: nobody; `tiermem up` names its dev tenant."
        ),
    )


STACK_FILE = "stack.json"
DEFAULT_DATA_DIR = Path(".tiermem")


def stack_file(data_dir: Path) -> Path:
    return data_dir / STACK_FILE


def read_stack_file(data_dir: Path) -> dict[str, Any] | None:
    path = stack_file(data_dir)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


class StackFileSource(PydanticBaseSettingsSource):
    """Lowest-priority source: the addresses a running `tiermem up` recorded in its data dir, so
    other commands find the embedded stack without any configuration."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        data_dir: Path,
        higher: tuple[PydanticBaseSettingsSource, ...] = (),
    ) -> None:
        super().__init__(settings_cls)
        self._data_dir = data_dir
        self._higher = higher

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        recorded = read_stack_file(self._data_dir) or {}
        # Sources are deep-merged, so an explicit TIERMEM_API_KEYS would be merged with the dev key
        # `tiermem up` recorded, and that key could never be revoked: an explicit setting replaces it.
        if "api_keys" in recorded and any("api_keys" in source() for source in self._higher):
            del recorded["api_keys"]
            # The dev tenant is an operator only while its dev key is the one that works.
            recorded.pop("operator_tenants", None)
        return recorded


def load_settings(data_dir: Path | None = None, **overrides: Any) -> TierMemSettings:
    """Settings from (highest first) explicit overrides, the environment, and the stack file of
    the data dir (`data_dir` argument, else `TIERMEM_DATA_DIR`, else `./.tiermem`)."""
    resolved = data_dir or Path(os.environ.get("TIERMEM_DATA_DIR") or DEFAULT_DATA_DIR)

    class _WithStackFile(TierMemSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            higher = (init_settings, env_settings, file_secret_settings)
            return (*higher, StackFileSource(settings_cls, resolved, higher))

    loaded = _WithStackFile(data_dir=resolved, **overrides)
    return TierMemSettings.model_validate(loaded.model_dump())
