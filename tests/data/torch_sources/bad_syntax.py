def _get_cuda_arch_flags(cflags=None:
    supported_arches = ["8.6"
