"""Tests of the light client package (client/tiermem_client)."""
