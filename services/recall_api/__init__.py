"""recall-api: what agents read on every turn (L0), on demand (L1, L2), and the explicit fact save.

Entry points: `create_app` (app.py: FastAPI + MCP over streamable HTTP) and `run_stdio` (mcp/server.py:
MCP over stdio).

Rooms, from the top (import-linter keeps the order, see pyproject.toml): app.py; mcp/ and ui/ (the agent
tools, the memory browser) over http/ (routes and what every request meets); service.py
(`RecallService`); l0/, search/ (L1), graph/ (L2), facts/ and write/ side by side; retrieval/ (what the
reads share); then the bodies (schemas.py, write_schemas.py), settings.py, errors.py and auth.py."""
