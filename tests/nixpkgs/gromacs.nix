# Stand-in for pkgs/applications/science/molecular-dynamics/gromacs/default.nix at Swarsel/nixpkgs 4aa6836a648ca76c68866decf0c8965e36ec2a3b (gromacs 2026.2; NixOS/nixpkgs' copy in the index, 218c4c526e746305ea3716da818f9d3ea693f4d4, is the old 2022.4):
# - `cpuAcceleration ? null`: the GMX_SIMD level (`lib.cmakeFeature "GMX_SIMD" (SIMD
#   cpuAcceleration)`); with none given: SSE4.1 on x86_64-linux, ARM_NEON_ASIMD on
#   aarch64-linux, else None. The recipe passes any string through; GROMACS 2026's CMake
#   accepts AUTO None SSE2 SSE4.1 AVX_128_FMA AVX_256 AVX2_256 AVX2_128 AVX_512 ARM_NEON_ASIMD
#   ARM_SVE IBM_VSX Reference (AVX_512_KNL, MIC and ARM_NEON are gone; the recipe's comment
#   still lists the old ones), and any other value fails at configure time: refused here at
#   evaluation, so a stale value cannot pass.
# - `enableCuda ? config.cudaSupport`: a gromacs made in a CUDA-enabled set is a CUDA gromacs
#   (GMX_GPU=CUDA, CMAKE_CUDA_ARCHITECTURES = flags.cmakeCudaArchitecturesString, built with
#   cudaPackages.backendStdenv, whose capability assertions hold); `assert enableCuda ->
#   singlePrec`.
{
  config,
  stdenv,
  cudaPackages,
  cpuAcceleration ? null,
  enableCuda ? config.cudaSupport,
  enableMpi ? false,
  singlePrec ? true,
}:
assert enableCuda -> singlePrec;
let
  system = stdenv.hostPlatform.system;
  SIMD =
    if cpuAcceleration != null then
      cpuAcceleration
    else if system == "x86_64-linux" then
      "SSE4.1"
    else if system == "aarch64-linux" then
      "ARM_NEON_ASIMD"
    else
      "None";
  # GROMACS 2026 CMakeLists.txt gmx_option_multichoice(GMX_SIMD ...).
  known = [
    "AUTO"
    "None"
    "SSE2"
    "SSE4.1"
    "AVX_128_FMA"
    "AVX_256"
    "AVX2_256"
    "AVX2_128"
    "AVX_512"
    "ARM_NEON_ASIMD"
    "ARM_SVE"
    "IBM_VSX"
    "Reference"
  ];
  checkedSIMD =
    if builtins.elem SIMD known then
      SIMD
    else
      throw "gromacs: GMX_SIMD=${SIMD} is not one of GROMACS 2026's values (${builtins.concatStringsSep " " known})";
in
stdenv.mkDerivation {
  pname = "gromacs";
  version = "2026.2";
  backendStdenv = if enableCuda then cudaPackages.backendStdenv else null;
  record = {
    package = "gromacs";
    GMX_SIMD = checkedSIMD;
    cmakeFlags = [ "-DGMX_SIMD:STRING=${checkedSIMD}" ] ++ (if enableCuda then [ "-DGMX_GPU:STRING=CUDA" ] else [ ]);
    inherit enableCuda enableMpi;
  }
  // (
    if enableCuda then
      {
        cuda = cudaPackages.cudaMajorMinorVersion;
        CMAKE_CUDA_ARCHITECTURES = cudaPackages.flags.cmakeCudaArchitecturesString;
      }
    else
      { }
  );
  outputFiles = [
    "bin/gmx"
    "lib/libgromacs.so.10"
  ];
  passthru = {
    inherit enableCuda;
  };
  meta.license = {
    shortName = "lgpl21Plus";
    free = true;
  };
}
