"""The capability model: CUDA capabilities and AMD gfx targets, compatibility, CUDA releases, GPU
models, drivers, systems and the knowledge base types.

Pure: no I/O, no clock, no environment.
"""
