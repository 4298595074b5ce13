# Stand-in for pkgs/by-name/on/onednn/package.nix at NixOS/nixpkgs b1325fd54d3a70772aae07dc3f39ec55e904dafa (onednn 3.10.2):
# a plain cmake build with no argument beyond its inputs (no ISA option: oneDNN's JIT picks the
# best ISA the CPU has at run time, src/cpu/x64/cpu_isa_traits.cpp), outputs out, dev and doc,
# tests off ("Tests fail on some Hydra builders, because they do not support SSE4.2"),
# licence asl20. The recipe takes no `cudaSupport`/`rocmSupport`.
{
  stdenv,
}:
stdenv.mkDerivation {
  pname = "onednn";
  version = "3.10.2";
  record = {
    package = "onednn";
    doCheck = false;
  };
  outputFiles = [
    "lib/libdnnl.so.3"
    "include/dnnl.h"
  ];
  meta.license = {
    shortName = "asl20";
    free = true;
  };
}
