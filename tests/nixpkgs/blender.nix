# Stand-in for pkgs/by-name/bl/blender/package.nix at NixOS/nixpkgs 039cb39bf705d9d28f3c961c6fc8919b134613ee (blender 5.1.1):
# `cudaSupport ? config.cudaSupport` and `rocmSupport ? config.rocmSupport` choose Cycles' CUDA
# and HIP binaries (WITH_CYCLES_CUDA_BINARIES, WITH_CYCLES_HIP_BINARIES) and add
# cudaPackages.cuda_cudart (buildInputs) and the backend stdenv with CUDA: a package whose store
# path a system-wide `cudaSupport = true` changes although no fleet plans it (the machine
# module must leave it alone). With CUDA its licence list adds nvidiaCudaRedist (unfree).
{
  stdenv,
  config,
  cudaPackages,
  rocmPackages,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? config.rocmSupport,
}:
stdenv.mkDerivation {
  pname = "blender";
  version = "5.1.1";
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  record = {
    package = "blender";
    WITH_CYCLES_CUDA_BINARIES = cudaSupport;
    WITH_CYCLES_HIP_BINARIES = rocmSupport;
    cudart = if cudaSupport then "${cudaPackages.cuda_cudart}" else null;
    hip = if rocmSupport then "${rocmPackages.clr}" else null;
  };
  meta.license = {
    shortName = "gpl2Plus";
    free = true;
  };
}
