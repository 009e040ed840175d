"""Bad-input corpus: a spec that never finishes importing."""
import time

while True:
    time.sleep(0.1)
