# Stand-in for pkgs/development/python-modules/cupy: it never reads cudaCapabilities or flags
# (cupy compiles its kernels at run time), so a cupy variant per capability is useless
# (NIXPKGS.md section 5).  It does not take cudnn: CuPy 13 removed its cuDNN module, and
# pkgs/development/python-modules/cupy/default.nix (mid-2026) no longer lists cudnn.  Like the real
# one it links nccl, whose store path does follow the
# capabilities; the plan therefore builds cupy only with the default list.
{
  buildPythonPackage,
  cudaPackages,
  numpy,
  fastrlock,
}:
buildPythonPackage {
  pname = "cupy";
  version = "13.6.0";
  pyproject = true;
  backendStdenv = cudaPackages.backendStdenv;
  dependencies = [
    numpy
    fastrlock
  ];
  record = {
    cuda = cudaPackages.cudaMajorMinorVersion;
    usesCapabilities = false;
    cudaDependencies = {
      cuda_cudart = "${cudaPackages.cuda_cudart}";
      libcublas = "${cudaPackages.libcublas}";
      nccl = "${cudaPackages.nccl}";
    };
  };
  meta.license = {
    shortName = "mit";
    free = true;
  };
}
