"""Pure core: value types, compatibility, planning, graph, matrix. No I/O, no clock, no env."""
