"""Bad-input corpus: a spec that defines no operator."""
X = 1
