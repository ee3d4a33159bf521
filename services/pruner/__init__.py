"""pruner: forgets on a schedule (expired episodes, memories nobody recalls, superseded fact
versions) and carries out erasure requests across every store."""
