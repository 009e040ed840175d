"""Bad-input corpus: a spec that calls sys.exit(0) at import (used to make verify exit 0, nothing checked)."""
import sys

sys.exit(0)
