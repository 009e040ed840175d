"""Measurements that touch the GPU; see opgate.gpu for the layers."""
