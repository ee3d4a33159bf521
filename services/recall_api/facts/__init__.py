"""Facts on demand: `memory_save` through the write policy, `memory_recall` (the user's current
facts), and the working rules (procedural memory: facts with subject `procedure`)."""
