"""Target families: CUDA capabilities, ROCm gfx processors and CPU levels, one package each.

``base`` is the interface every family implements, ``registry`` the only module that names the
families; ``cuda/``, ``rocm/`` and ``cpu/`` each hold a family's target type, knowledge-base
model, rules, planning engine, picker and verification. Pure: no I/O, no clock, no environment.
"""
