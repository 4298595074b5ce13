"""Binaries: what compiled device code holds, read through the families' own formats (CUDA's
fatbin containers, AMD's offload bundles, in core/families/<f>/) on the buffer types here;
cubin notes, verification, and doctor's verdicts.

Pure: no I/O, no clock, no environment.
"""
