"""The MCP edge (official `mcp` SDK): the agent-facing tools over the same `RecallService` as HTTP,
served over streamable HTTP by the app or over stdio by `tiermem mcp`."""
