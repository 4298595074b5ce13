"""The shared model: GPU models, systems, vendors and the knowledge base types (each family's own
model lives in :mod:`capplan.core.families`).

Pure: no I/O, no clock, no environment.
"""
