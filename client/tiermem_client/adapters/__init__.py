"""Adapters for agent frameworks (optional extras: `tiermem-client[langgraph]`, `[pydantic-ai]`)."""
