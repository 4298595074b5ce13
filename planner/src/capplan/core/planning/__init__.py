"""Planning: the config, the planner and its rules, set cover, the dependency graph, schedules,
the matrix, dispatch and CI workflows.

Pure: no I/O, no clock, no environment.
"""
