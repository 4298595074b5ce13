"""Fixture: no list, only prose.

    supported_arches = ['3.5', '3.7']
"""


def _get_cuda_arch_flags(cflags=None):
    # supported_arches = ['8.6']
    return ['-gencode=arch=compute_86,code=sm_86']
