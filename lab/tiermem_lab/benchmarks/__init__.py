"""`tiermem bench`: the benchmarks of the earlier issues in one place (not tests).

- `recall`: L0 latency over HTTP at up to 100k episodes on the embedded default, with the ratio
  against the same queries on `qdrant-client` local mode in the same run.
- `ingest`: N synthetic sessions (English and Korean, from `synthetic`) through the real pipeline on an
  embedded stack: sessions per second, and the ratio of the end-to-end time to the time needed only
  to embed the texts the pipeline embedded (episode summaries, passages, facts) with the same model
  in the same run. Target ≤ 1.3: the pipeline should cost little beyond the embedding it cannot avoid.
- `vector`: the vector adapters alone (run by lab/scripts/bench_vector.py; no CLI command).
"""
