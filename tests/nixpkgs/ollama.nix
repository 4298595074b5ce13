# Follows NixOS/nixpkgs pkgs/by-name/ol/ollama/package.nix, ollama 0.30.7 (no commit id: read from the code index's copy of the file; the one commit stored for this path, 373929394f8f5fb03e84caabf7ffab10e318e299, has ollama 0.1.44)
# Stand-in for pkgs/by-name/ol/ollama/package.nix (read at nixpkgs mid-2026):
# - `acceleration ? null` (one of null false "rocm" "cuda" "vulkan", asserted); with null the
#   set's config decides: CUDA when config.cudaSupport, ROCm when config.rocmSupport, and CPU
#   when both are on (validateFallback: "they are mutually exclusive; falling back to cpu");
# - CUDA: `cudaArches ? cudaPackages.flags.realArches` (SASS only, no PTX), passed as
#   -DCMAKE_CUDA_ARCHITECTURES with the sm_ prefix removed;
# - ROCm: `rocmGpuTargets ? rocmPackages.clr.localGpuTargets or (rocmPackages.clr.gpuTargets or
#   [ ])`, passed as -DAMDGPU_TARGETS=<;-joined>, built against clr, hipblas and rocblas.
{
  config,
  stdenv,
  cudaPackages,
  rocmPackages,
  rocmGpuTargets ? rocmPackages.clr.localGpuTargets or (rocmPackages.clr.gpuTargets or [ ]),
  cudaArches ? cudaPackages.flags.realArches or [ ],
  acceleration ? null,
}:
assert builtins.elem acceleration [
  null
  false
  "rocm"
  "cuda"
  "vulkan"
];
let
  optionalAttrs = cond: as: if cond then as else { };
  validateFallback = !(config.rocmSupport && config.cudaSupport);
  shouldEnable =
    mode: fallback: (acceleration == mode) || (fallback && acceleration == null && validateFallback);
  enableRocm = shouldEnable "rocm" config.rocmSupport;
  enableCuda = shouldEnable "cuda" config.cudaSupport;
  removeSMPrefix =
    str:
    let
      matched = builtins.match "sm_(.*)" str;
    in
    if matched == null then str else builtins.head matched;
in
stdenv.mkDerivation {
  pname = "ollama";
  version = "0.32.0";
  record = {
    package = "ollama";
    inherit enableCuda enableRocm;
  }
  // optionalAttrs enableCuda {
    cuda = cudaPackages.cudaMajorMinorVersion;
    CMAKE_CUDA_ARCHITECTURES = builtins.concatStringsSep ";" (map removeSMPrefix cudaArches);
    dependencies.cuda_cudart = "${cudaPackages.cuda_cudart}";
  }
  // optionalAttrs enableRocm {
    AMDGPU_TARGETS = builtins.concatStringsSep ";" rocmGpuTargets;
    rocmDependencies = {
      clr = "${rocmPackages.clr}";
      hipblas = "${rocmPackages.hipblas}";
      rocblas = "${rocmPackages.rocblas}";
    };
  };
  passthru = {
    inherit enableCuda enableRocm rocmGpuTargets;
  };
  meta.license = {
    shortName = "mit";
    free = true;
  };
}
