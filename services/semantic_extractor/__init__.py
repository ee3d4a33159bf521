"""semantic-extractor: EpisodeCreated → facts (write policy), entities and relations → EntityUpserted."""
