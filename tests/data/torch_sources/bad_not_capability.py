"""Fixture: an entry that is not a capability."""


def _get_cuda_arch_flags(cflags=None):
    supported_arches = ['8.0', '8.x', '9.0']
    return supported_arches
