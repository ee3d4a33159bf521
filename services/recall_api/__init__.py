"""recall-api: what agents read on every turn (L0), on demand (L1, L2), and the explicit fact save.

Entry points: `create_app` (FastAPI + MCP over streamable HTTP) and `run_stdio` (MCP over stdio)."""
