# Follows NixOS/nixpkgs pkgs/by-name/on/onnxruntime/package.nix at 02688433ee15c0ca0913e2955e0c44a7477e497d
# Stand-in for pkgs/by-name/on/onnxruntime: CMAKE_CUDA_ARCHITECTURES from
# cudaPackages.flags.cmakeCudaArchitecturesString; with ROCm, CMAKE_HIP_ARCHITECTURES =
# concatStringsSep ";" (rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets) (so it
# follows the scope it is built in: rocmPackages.gfx942 gives gfx942 only), onnxruntime_ROCM_HOME
# = clr, buildInputs from the scope (clr, hipblas, rocblas, miopen, ...; MIOPEN_PATH = miopen, so
# MIOpen's composable_kernel rule reaches it), onnxruntime_USE_COMPOSABLE_KERNEL off, and
# `requiredSystemFeatures = lib.optionals (cudaSupport || rocmSupport) [ "big-parallel" ]`.
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
  # package.nix: requiredSystemFeatures = lib.optionals (cudaSupport || rocmSupport) [ "big-parallel" ].
  requiredSystemFeatures = if cudaSupport || rocmSupport then [ "big-parallel" ] else [ ];
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
        onnxruntime_USE_COMPOSABLE_KERNEL = false;
        rocmDependencies = {
          clr = "${rocmPackages.clr}";
          hipblas = "${rocmPackages.hipblas}";
          rocblas = "${rocmPackages.rocblas}";
          miopen = "${rocmPackages.miopen}";
        };
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
