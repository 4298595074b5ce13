"""Fixture: the list exists only at run time."""
import os


def _get_cuda_arch_flags(cflags=None):
    supported_arches = os.environ.get('ARCHES', '').split(';')
    return supported_arches
