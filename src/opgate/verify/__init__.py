"""`opgate verify`: numerical correctness of an operator across backends and dtypes."""
