"""Text analysis shared by the keyword index and the hashing embedder: normalising,
splitting into words, stemming, and parsing a search query."""
