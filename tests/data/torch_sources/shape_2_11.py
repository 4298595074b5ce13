"""Fixture: compiler tables reaching CUDA 13.0, the list itself as in 2.9."""
import collections

LOWEST = (5, 0, 0)

CUDA_GCC_VERSIONS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    '11.7': ((6, 0, 0), (12, 0)),
    '12.9': ((6, 0, 0), (15, 0)),
    '12.10': ((6, 0, 0), (15, 0)),
    '13.0': ((6, 0, 0), (16, 0)),
}
CUDA_CLANG_VERSIONS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    '12.0': ((7, 0), (15, 0)),
    '13.0': ((7, 0), (21, 0)),
}


def _get_cuda_arch_flags(cflags=None):
    named_arches = collections.OrderedDict([('Rubin', '10.7+PTX')])
    supported_arches = ['8.0', '10.7', '10.7a', '12.1', '12.1a']
    valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]
    return valid_arch_strings
