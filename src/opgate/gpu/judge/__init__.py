"""Pure judging of GPU figures (no device, no torch/CuPy/CUDA at import); see opgate.gpu for the layers."""
