"""L2, on demand: the knowledge graph around an entity, with provenance limited to the requesting
user's own episodes."""
