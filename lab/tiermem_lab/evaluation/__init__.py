"""`tiermem eval`: LoCoMo retrieval against same-run baselines, and the Korean cross-session scenarios.

Modules by responsibility: `locomo` (the data set: model, parsing, session events), `baselines`
(raw-turn rankings: BM25, dense, their fusion, the last N sessions), `metrics` (recall, L0 and
abstention tables, comparisons, targets: the JSON report), `report` (console tables), `plot` (the
PNG; matplotlib is the lab's optional `plot` extra), `harness` (the embedded stack and recall API
in-process), `locomo_run` (ingest, consolidate, ask), `scenarios` (the Korean cross-session set) and
`commands` (the typer commands). The pure parts are unit-tested; the harness drives the real stack.
"""
