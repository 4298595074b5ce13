"""Fixture: annotated tables whose bounds name module constants (2.0 .. 2.10)."""
from collections import OrderedDict
from typing import Dict, Tuple

VersionRange = Tuple[Tuple[int, ...], Tuple[int, ...]]
VersionMap = Dict[str, VersionRange]
LOWEST_GCC: Tuple[int, ...] = (5, 0, 0)
LOWEST_CLANG = (3, 3, 0)

CUDA_GCC_VERSIONS: VersionMap = {
    '11.0': (LOWEST_GCC, (10, 0)),
    '11.8': ((6, 0, 0), (12, 0)),
}

CUDA_CLANG_VERSIONS: VersionMap = {
    '11.1': (LOWEST_CLANG, (11, 0)),
    '11.8': (LOWEST_CLANG, (14, 0)),
}


class Helper:
    def unrelated(self):
        supported = ['1.0']  # a different name: ignored
        return supported


def _get_cuda_arch_flags(cflags=None):
    named_arches = OrderedDict([
        ('Volta+Tegra', '7.2'),
        ('Volta', '7.0+PTX'),
        ('Hopper', '9.0+PTX'),
    ])
    supported_arches = ['7.0', '7.2', '7.5', '8.0', '8.6', '8.7', '8.9', '9.0', '9.0a']
    valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]
    return valid_arch_strings, named_arches
