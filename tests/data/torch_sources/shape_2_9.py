"""Fixture: a suffixes and an unsorted list (the Thor renumbering put 11.0 before 10.3)."""
import collections


def _get_cuda_arch_flags(cflags=None):
    if cflags:
        return []
    named_arches = collections.OrderedDict([
        ('Blackwell+Tegra', '11.0'),
        ('Blackwell', '10.0;10.3;12.0;12.1+PTX'),
    ])
    supported_arches = ['9.0', '9.0a',
                        '10.0', '10.0a', '11.0', '11.0a', '10.3', '10.3a',
                        '12.0', '12.0a', '12.1', '12.1a']
    valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]
    return valid_arch_strings
