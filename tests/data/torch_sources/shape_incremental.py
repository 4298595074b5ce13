"""Fixture: lists built step by step."""
import collections

OLD = ['5.0', '5.2']


def _get_cuda_arch_flags(cflags=None):
    named_arches = dict(Maxwell='5.0;5.2+PTX')
    named_arches['Ampere'] = '8.0 8.6+PTX'
    named_arches.update([('Ada', '8.9+PTX')])
    supported_arches = [*OLD, '6.0']
    supported_arches += ['7.0']
    supported_arches.append('7.5')
    supported_arches.extend(('8.0', '8.6'))
    supported_arches.append('8.6')
    valid_arch_strings = supported_arches + [s + '+PTX' for s in supported_arches]
    return valid_arch_strings, collections, named_arches
