"""Fixture: dict literal for named arches, tuple list, f-string suffix."""


def _get_cuda_arch_flags(cflags=None):
    named_arches = {
        'Turing': '7.5+PTX',
        'Ampere': ('8.0', '8.6+PTX'),
    }
    supported_arches = ('7.5', '8.0', 'sm_86')
    valid_arch_strings = list(supported_arches) + [f"{s}+PTX" for s in supported_arches]
    return valid_arch_strings, named_arches
