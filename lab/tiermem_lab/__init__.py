"""The tiermem lab: evaluation (`tiermem eval`), benchmarks (`tiermem bench`) and the seeding helpers
they and the recall tests share. A development install beside tiermem (scripts/bootstrap), never part
of the runtime wheel or the image; it imports services, services never import it."""
