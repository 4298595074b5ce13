# Stand-in for pkgs/development/python-modules/torchvision: it follows torch
# (`inherit (torch) cudaCapabilities cudaPackages cudaSupport;`,
#  TORCH_CUDA_ARCH_LIST = concatStringsSep ";" torch.cudaCapabilities).
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
