# Stand-in for pkgs/by-name/on/onnxruntime: CMAKE_CUDA_ARCHITECTURES from
# cudaPackages.flags.cmakeCudaArchitecturesString; with ROCm, CMAKE_HIP_ARCHITECTURES =
# concatStringsSep ";" (rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets) and
# onnxruntime_ROCM_HOME = clr.
{
  config,
  stdenv,
  cudaPackages,
  rocmPackages,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? config.rocmSupport,
  # by-name/on/onnxruntime/package.nix: `ncclSupport ? cudaSupport &&
  # cudaPackages.nccl.meta.available`, so a pre-Thor Jetson build goes on without NCCL.
  ncclSupport ? cudaSupport && cudaPackages.nccl.meta.available,
}:
stdenv.mkDerivation {
  pname = "onnxruntime";
  version = "1.23.2";
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  # pkgs/by-name/on/onnxruntime/package.nix: requiredSystemFeatures = [ "big-parallel" ] with CUDA.
  requiredSystemFeatures = if cudaSupport then [ "big-parallel" ] else [ ];
  record = {
    package = "onnxruntime";
    inherit cudaSupport;
  }
  // (
    if cudaSupport then
      {
        cuda = cudaPackages.cudaMajorMinorVersion;
        CMAKE_CUDA_ARCHITECTURES = cudaPackages.flags.cmakeCudaArchitecturesString;
        inherit (cudaPackages.flags) cudaCapabilities cudaForwardCompat;
        dependencies = {
          cudnn = "${cudaPackages.cudnn}";
          nccl = if ncclSupport then "${cudaPackages.nccl}" else null;
          cuda_cudart = "${cudaPackages.cuda_cudart}";
        };
      }
    else
      { }
  )
  // (
    if rocmSupport && !cudaSupport then
      {
        inherit rocmSupport;
        CMAKE_HIP_ARCHITECTURES = builtins.concatStringsSep ";" (
          rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets
        );
        rocmDependencies.clr = "${rocmPackages.clr}";
      }
    else
      { }
  );
  passthru = {
    inherit cudaSupport cudaPackages rocmSupport;
  };
  meta.license = {
    shortName = "mit";
    free = true;
  };
}
