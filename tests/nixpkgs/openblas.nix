# Stand-in for pkgs/by-name/op/openblas/package.nix (openblas 0.3.27):
# - `target ? null`, `dynamicArch ? null`, `enableAVX512 ? false`;
# - configs.x86_64-linux: TARGET "ATHLON", DYNAMIC_ARCH true, NO_AVX512 = !enableAVX512;
#   configs.aarch64-linux: TARGET "ARMV8", DYNAMIC_ARCH true (setTarget / setDynamicArch replace
#   the defaults when the arguments are given): by default one build picks its kernels at run
#   time;
# - a shared library: the output is a folder with lib/libopenblas.so.0 and the lib/libblas.so.3
#   alias (postInstall's symlinks; here files holding the record).
{
  stdenv,
  target ? null,
  dynamicArch ? null,
  enableAVX512 ? false,
}:
let
  system = stdenv.hostPlatform.system;
  setTarget = x: if target == null then x else target;
  setDynamicArch = x: if dynamicArch == null then x else dynamicArch;
  configs = {
    x86_64-linux = {
      TARGET = setTarget "ATHLON";
      DYNAMIC_ARCH = setDynamicArch true;
      NO_AVX512 = !enableAVX512;
    };
    aarch64-linux = {
      TARGET = setTarget "ARMV8";
      DYNAMIC_ARCH = setDynamicArch true;
    };
  };
  config = configs.${system} or (throw "unsupported system: ${system}");
in
stdenv.mkDerivation {
  pname = "openblas";
  version = "0.3.27";
  record = {
    package = "openblas";
  }
  // config;
  outputFiles = [
    "lib/libopenblas.so.0"
    "lib/libblas.so.3"
    "include/cblas.h"
  ];
  meta.license = {
    shortName = "bsd3";
    free = true;
  };
}
