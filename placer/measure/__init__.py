"""Devices, kernels, the placed executor and the measurers."""
