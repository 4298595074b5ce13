"""Planning's orchestration: the config, the planner loop over the families, the dependency
graph, schedules, the matrix, dispatch and CI workflows (each family's engine lives in
:mod:`capplan.core.families`).

Pure: no I/O, no clock, no environment.
"""
