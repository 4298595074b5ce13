# Stand-in for pkgs/by-name/ll/llama-cpp/package.nix (read at nixpkgs mid-2026):
# - `cudaSupport ? config.cudaSupport`, `rocmSupport ? config.rocmSupport`;
# - CUDA: CMAKE_CUDA_ARCHITECTURES = cudaPackages.flags.cmakeCudaArchitecturesString, built
#   against cuda_cudart and libcublas;
# - ROCm: `rocmGpuTargets ? rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets`,
#   CMAKE_HIP_ARCHITECTURES = concatStringsSep ";" rocmGpuTargets, built against clr, hipblas
#   and rocblas (so a per-target scope changes its ROCm libraries).
{
  config,
  stdenv,
  cudaPackages,
  rocmPackages,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? config.rocmSupport,
  rocmGpuTargets ? rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets,
}:
stdenv.mkDerivation {
  pname = "llama-cpp";
  version = "10380";
  record = {
    package = "llama-cpp";
    inherit cudaSupport rocmSupport;
  }
  // (
    if cudaSupport then
      {
        cuda = cudaPackages.cudaMajorMinorVersion;
        CMAKE_CUDA_ARCHITECTURES = cudaPackages.flags.cmakeCudaArchitecturesString;
        inherit (cudaPackages.flags) cudaCapabilities;
        dependencies = {
          cuda_cudart = "${cudaPackages.cuda_cudart}";
          libcublas = "${cudaPackages.libcublas}";
        };
      }
    else
      { }
  )
  // (
    if rocmSupport then
      {
        CMAKE_HIP_ARCHITECTURES = builtins.concatStringsSep ";" rocmGpuTargets;
        rocmDependencies = {
          clr = "${rocmPackages.clr}";
          hipblas = "${rocmPackages.hipblas}";
          rocblas = "${rocmPackages.rocblas}";
        };
      }
    else
      { }
  );
  passthru = {
    inherit cudaSupport rocmSupport rocmGpuTargets;
  };
  meta.license = {
    shortName = "mit";
    free = true;
  };
}
