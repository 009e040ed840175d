"""Bad-input corpus: a spec that ends its process with os._exit(7) at import."""
import os

os._exit(7)
