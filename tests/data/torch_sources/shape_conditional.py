"""Fixture: additions that depend on the CUDA version of the build."""
import collections

import torch


def _get_cuda_arch_flags(cflags=None):
    named_arches = collections.OrderedDict([('Hopper', '9.0+PTX')])
    supported_arches = ['8.0', '8.6', '9.0']
    if torch.version.cuda is not None and float(torch.version.cuda) >= 12.8:
        supported_arches += ['10.0', '12.0']
        named_arches['Blackwell'] = '10.0;12.0+PTX'
    elif torch.version.cuda == '12.6':
        supported_arches = supported_arches + ['9.0a']
    extra = ['8.9'] if torch.version.cuda else []
    supported_arches = supported_arches + extra
    valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]
    return valid_arch_strings
