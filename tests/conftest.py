"""Shared fixtures. Real servers are started by session-scoped fixtures in tests/fixtures/."""

import os

# Nothing may download at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = [
    "tests.fixtures.nats",
    "tests.fixtures.falkordb",
    "tests.fixtures.llm_stub",
    "tests.fixtures.stack",
]
