# Follows NixOS/nixpkgs pkgs/by-name/ma/magma/package.nix at eddf58151840e54e4fc7a51bcbea52fa78b49c35
# Stand-in for pkgs/by-name/ma/magma/package.nix (formerly .../science/math/magma/generic.nix):
# with CUDA it builds for flags.cmakeCudaArchitecturesString and MIN_ARCH (lowest capability,
# "75" -> "750"); with ROCm (HIP) for GPU_TARGET:
# - `gpuTargets ? [ ]` ("Non-CUDA targets, that is HIP"), when non-empty, intersected with
#   `supportedGpuTargets` (magma's CMake VALID_GFXS, WITHOUT the "gfx" prefix: real nixpkgs
#   intersects the argument as given, so `gpuTargets = [ "gfx1030" ]` matches nothing and
#   throws; `[ "1030" ]` is the spelling that builds);
# - else `rocmPackages.clr.gpuTargets` (the default list, never the scope's localGpuTargets)
#   with "gfx" removed, intersected likewise;
# - nothing left: throw "No supported GPU targets specified. Requested GPU targets: ..."
#   (gpuArchWarner);
# - `rocmSupport ? !cudaSupport` ("At least one back-end has to be enabled, and we can't
#   default to CUDA since it's unfree"); magma-hip (all-packages.nix) is the ROCm one.
{
  config,
  stdenv,
  cudaPackages,
  rocmPackages,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? !cudaSupport,
  gpuTargets ? [ ],
  static ? false,
}:
let
  lib = import ./lib.nix;
  inherit (cudaPackages) flags;

  # package.nix supportedGpuTargets
  supportedGpuTargets = [
    "700"
    "701"
    "702"
    "703"
    "704"
    "705"
    "801"
    "802"
    "803"
    "805"
    "810"
    "900"
    "902"
    "904"
    "906"
    "908"
    "909"
    "90c"
    "1010"
    "1011"
    "1012"
    "1030"
    "1031"
    "1032"
    "1033"
  ];
  removeGfx = t: if builtins.substring 0 3 t == "gfx" then builtins.substring 3 (builtins.stringLength t - 3) t else t;
  rocmArches = map removeGfx rocmPackages.clr.gpuTargets;
  supportedRocmArches = lib.intersectLists rocmArches supportedGpuTargets;
  unsupportedRocmArches = lib.subtractLists supportedRocmArches rocmArches;
  supportedCustomGpuTargets = lib.intersectLists gpuTargets supportedGpuTargets;
  unsupportedCustomGpuTargets = lib.subtractLists supportedCustomGpuTargets gpuTargets;
  gpuArchWarner =
    supported: unsupported:
    lib.throwIf (supported == [ ]) (
      "No supported GPU targets specified. Requested GPU targets: "
      + builtins.concatStringsSep ", " unsupported
    ) supported;
  gpuTargetString = builtins.concatStringsSep "," (
    if gpuTargets != [ ] then
      gpuArchWarner supportedCustomGpuTargets unsupportedCustomGpuTargets
    else if rocmSupport then
      gpuArchWarner supportedRocmArches unsupportedRocmArches
    else if cudaSupport then
      [ ]
    else
      throw "No GPU targets specified"
  );
  minArch =
    let
      archs = map flags.dropDots flags.cudaCapabilities;
    in
    "${builtins.head (builtins.sort (a: b: builtins.compareVersions a b < 0) archs)}0";
in
# package.nix: `assert (builtins.match "[^[:space:]]*" gpuTargetString) != null;` forces the
# target string (and so the throw) whenever the package is evaluated.
assert builtins.match "[^[:space:]]*" gpuTargetString != null;
stdenv.mkDerivation {
  pname = "magma";
  version = "2.9.0";
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  env =
    if cudaSupport then
      { CMAKE_CUDA_ARCHITECTURES = flags.cmakeCudaArchitecturesString; }
    else if rocmSupport then
      { GPU_TARGET = gpuTargetString; }
    else
      { };
  record = {
    package = "magma";
    inherit cudaSupport static;
  }
  // (
    if rocmSupport && !cudaSupport then
      {
        inherit rocmSupport gpuTargets;
        GPU_TARGET = gpuTargetString;
        rocm = rocmPackages.version;
        rocmDependencies = {
          clr = "${rocmPackages.clr}";
          hipblas = "${rocmPackages.hipblas}";
        };
      }
    else
      { }
  )
  // (
    if cudaSupport then
      {
        cuda = cudaPackages.cudaMajorMinorVersion;
        CMAKE_CUDA_ARCHITECTURES = flags.cmakeCudaArchitecturesString;
        MIN_ARCH = minArch;
        inherit (flags) cudaCapabilities cudaForwardCompat;
        dependencies = {
          cuda_cudart = "${cudaPackages.cuda_cudart}";
          libcublas = "${cudaPackages.libcublas}";
        };
      }
    else
      { }
  );
  passthru = {
    inherit
      cudaSupport
      cudaPackages
      rocmSupport
      gpuTargets
      ;
  };
  meta = {
    license = {
      shortName = "bsd3";
      free = true;
    };
    # magma/generic.nix: "dynamic CUDA support is broken
    # https://github.com/NixOS/nixpkgs/issues/239237"; one back-end, not both, not none.
    broken = (cudaSupport && !static) || !(cudaSupport || rocmSupport) || (cudaSupport && rocmSupport);
  };
}
