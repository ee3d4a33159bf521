"""Getting memory in and managing it: sessions in, where an accepted event is, erasure requests, and
memory an owner can list, read with its history, correct and forget."""
