"""The model every layer shares: a check's result and a run's report (`results`), and the kinds of failure
(`errors`). Plain data and exceptions; it imports nothing else of opgate."""
