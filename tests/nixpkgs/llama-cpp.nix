# Stand-in for pkgs/by-name/ll/llama-cpp/package.nix at Swarsel/nixpkgs 4aa6836a648ca76c68866decf0c8965e36ec2a3b (llama-cpp b9925; NixOS/nixpkgs' copy in the index, 389986cd4a245ae6dddf6d73ccea1692fee8c579, is the older b5760):
# - `cudaSupport ? config.cudaSupport`, `rocmSupport ? config.rocmSupport`;
# - `cpuArchDynamicDispatch ? true`: cmakeFlags GGML_CPU_ALL_VARIANTS and GGML_BACKEND_DL on,
#   so ggml builds one CPU backend per x86-64/Arm variant (libggml-cpu-*.so beside the
#   executables in bin/) and loads the best one at start; GGML_NATIVE is always off;
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
  cpuArchDynamicDispatch ? true,
}:
stdenv.mkDerivation {
  pname = "llama-cpp";
  version = "9925";
  record = {
    package = "llama-cpp";
    inherit cudaSupport rocmSupport cpuArchDynamicDispatch;
    GGML_NATIVE = false;
    GGML_CPU_ALL_VARIANTS = cpuArchDynamicDispatch;
    GGML_BACKEND_DL = cpuArchDynamicDispatch;
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
