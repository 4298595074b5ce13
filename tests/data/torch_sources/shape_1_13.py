"""Fixture: the 1.13 shape (plain dict assignment, three-part version tuples)."""
import collections
import os

BASE_GCC = (5, 0, 0)

CUDA_GCC_VERSIONS = {
    '10.2': (BASE_GCC, (8, 0, 0)),
    '11.4': ((6, 0, 0), (11, 5, 0)),
    '11.7': ((6, 0, 0), (11, 5, 0)),
}

CUDA_CLANG_VERSIONS = {
    '10.2': ((3, 3, 0), (8, 0, 0)),
    '11.7': ((6, 0, 0), (13, 0, 0)),
}


def _get_cuda_arch_flags(cflags=None):
    """Docstring mentions '8.6+PTX' but that alone must not count."""
    named_arches = collections.OrderedDict([
        ('Kepler+Tesla', '3.7'),
        ('Kepler', '3.5+PTX'),
        ('Maxwell', '5.0;5.2+PTX'),
        ('Ampere', '8.0;8.6+PTX'),
    ])

    supported_arches = ['3.5', '3.7', '5.0', '5.2', '6.0', '7.0',
                        '7.5', '8.0', '8.6']
    valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]

    wanted = os.environ.get('TORCH_CUDA_ARCH_LIST', '')
    for name, value in named_arches.items():
        wanted = wanted.replace(name, value)
    return [a for a in wanted.split(';') if a in valid_arch_strings]
