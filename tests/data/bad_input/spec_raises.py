"""Bad-input corpus: a spec that raises at import."""
raise RuntimeError("this spec is broken on purpose")
