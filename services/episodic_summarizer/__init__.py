"""episodic-summarizer: SessionCompleted → episode (summary, abstract, passages) → EpisodeCreated."""
