"""Fixture: lists at module level, and no +PTX handling anywhere."""

supported_arches = ['sm_70', 'compute_75', '80']
named_arches = [('Volta', '7.0'), ('Ampere', '8.0')]


def arch_flags(wanted):
    return [a for a in wanted if a in supported_arches]
