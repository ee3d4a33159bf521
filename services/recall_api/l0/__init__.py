"""L0, auto-inject on every turn: the query built from the message (`query`), the embedding that a
turn never waits for past its deadline (`deadline`), and what is injected (`select`: the `gate`, the
`subject` and `detail` checks for abstention), composed by `auto_recall.AutoRecall`."""
