"""What every read level shares: candidates read from the stores (dense and keyword hits under the
owner's filters), their ranking, the records and the `## Memory Context` section they become, the
per-call metrics and the recall counts the pruner relies on."""
