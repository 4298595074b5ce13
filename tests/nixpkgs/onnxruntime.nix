# Stand-in for pkgs/by-name/on/onnxruntime: CMAKE_CUDA_ARCHITECTURES from
# cudaPackages.flags.cmakeCudaArchitecturesString.
{
  config,
  stdenv,
  cudaPackages,
  cudaSupport ? config.cudaSupport,
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
  );
  passthru = {
    inherit cudaSupport cudaPackages;
  };
  meta.license = {
    shortName = "mit";
    free = true;
  };
}
