"""Binaries: what compiled device code holds (CUDA fatbins, AMD offload bundles and code objects),
verification, and limits read from sources.

Pure: no I/O, no clock, no environment.
"""
