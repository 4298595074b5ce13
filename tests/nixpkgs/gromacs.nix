# Stand-in for pkgs/applications/science/molecular-dynamics/gromacs/default.nix (gromacs 2022.4,
# the revision capplan's kb/cpu_packages.json cites):
# - `cpuAcceleration ? null`: the GMX_SIMD level, one of the values GROMACS' CMakeLists.txt
#   lists (the recipe's comment: AUTO None SSE2 SSE4.1 AVX_128_FMA AVX_256 AVX2_256 AVX2_128
#   AVX_512 AVX_512_KNL MIC ARM_NEON ARM_NEON_ASIMD);
# - with none given: SSE4.1 on x86_64-linux, ARM_NEON_ASIMD on aarch64-linux, else None;
# - cmakeFlags "-DGMX_SIMD:STRING=<level>": one SIMD level per build (compile-time selection).
{
  stdenv,
  cpuAcceleration ? null,
}:
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
in
stdenv.mkDerivation {
  pname = "gromacs";
  version = "2022.4";
  record = {
    package = "gromacs";
    GMX_SIMD = SIMD;
    cmakeFlags = [ "-DGMX_SIMD:STRING=${SIMD}" ];
  };
  outputFiles = [
    "bin/gmx"
    "lib/libgromacs.so.7"
  ];
  meta.license = {
    shortName = "lgpl21Plus";
    free = true;
  };
}
