# Stand-in for pkgs/development/libraries/science/math/magma/generic.nix: with CUDA it builds
# for flags.cmakeCudaArchitecturesString and MIN_ARCH (lowest capability, "75" -> "750").
{
  config,
  stdenv,
  cudaPackages,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? config.rocmSupport,
  static ? false,
}:
let
  inherit (cudaPackages) flags;
  minArch =
    let
      archs = map flags.dropDots flags.cudaCapabilities;
    in
    "${builtins.head (builtins.sort (a: b: builtins.compareVersions a b < 0) archs)}0";
in
stdenv.mkDerivation {
  pname = "magma";
  version = "2.9.0";
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  env = if cudaSupport then { CMAKE_CUDA_ARCHITECTURES = flags.cmakeCudaArchitecturesString; } else { };
  record = {
    package = "magma";
    inherit cudaSupport static;
  }
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
    inherit cudaSupport cudaPackages;
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
