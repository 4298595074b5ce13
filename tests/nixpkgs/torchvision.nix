# Follows NixOS/nixpkgs pkgs/development/python-modules/torchvision/default.nix at 36dba9c40e3912f7021e8648e1b4491ccd67b5e6
# Stand-in for pkgs/development/python-modules/torchvision: it follows torch
# (`inherit (torch) cudaCapabilities cudaPackages cudaSupport;`,
#  TORCH_CUDA_ARCH_LIST = concatStringsSep ";" torch.cudaCapabilities, FORCE_CUDA=1 with CUDA).
# It never reads torch.rocmSupport and sets FORCE_CUDA only with cudaSupport: torchvision's
# setup.py builds its GPU extension only with FORCE_CUDA or a visible GPU (none in the build
# sandbox), so with a ROCm torch it compiles no HIP code: its store path follows torch's, its
# contents hold no gfx code.
{
  buildPythonPackage,
  torch,
  pillow,
}:
let
  inherit (torch) cudaCapabilities cudaPackages cudaSupport;
  archList = builtins.concatStringsSep ";" cudaCapabilities;
in
buildPythonPackage {
  pname = "torchvision";
  version = "0.27.0";
  pyproject = true;
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  env = if cudaSupport then { TORCH_CUDA_ARCH_LIST = archList; } else { };
  dependencies = [
    torch
    pillow
  ];
  record = {
    inherit cudaSupport;
    # No HIP code whatever torch is built for (see the header).
    hipCode = false;
    torch = "${torch}";
  }
  // (
    if cudaSupport then
      {
        TORCH_CUDA_ARCH_LIST = archList;
        cuda = cudaPackages.cudaMajorMinorVersion;
      }
    else
      { }
  );
  passthru = {
    inherit torch cudaSupport cudaPackages;
  };
  meta.license = {
    shortName = "bsd3";
    free = true;
  };
}
