"""Reporters render results; they never judge them."""
