"""Bad-input corpus: a spec that segfaults at import."""
import ctypes

ctypes.string_at(0)
