"""Measurements on a live GPU (timing, graph capture). Torch is imported inside the functions."""
