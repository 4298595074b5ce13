# Follows NixOS/nixpkgs pkgs/development/python-modules/torch/source/default.nix at 6b516b42dd0f19e2ab9c9dd391cd40752a9dc096 (ROCm branch: rocmtoolkit_joined, vendorComposableKernel; CUDA branch: brokenConditions "Unsupported CUDA version": majors 11, 12)
# Stand-in for pkgs/development/python-modules/torch/source/default.nix, torch 2.12 as packaged
# in nixos-unstable mid-2026 (NIXPKGS.md section 6):
# - TORCH_CUDA_ARCH_LIST = config capabilities intersected with a hand-copied allowlist of
#   torch's supported_arches; the rest is dropped silently; it throws
#   "No supported GPU targets specified. Requested GPU targets: ..." only when nothing is left;
# - a non-empty gpuTargets is used verbatim (may contain "8.6+PTX");
# - no PTX unless gpuTargets asks for it: cudaForwardCompat is ignored;
# - passthru gpuTargetString, cudaCapabilities (the allowlisted ones), cudaPackages;
# - requiredSystemFeatures = [ "big-parallel" ].
# ROCm (the same file, torch 2.12/2.13):
# - PYTORCH_ROCM_ARCH = gpuTargetString: a non-empty gpuTargets verbatim (no validation), else
#   `subtractLists [ "gfx1010" "gfx1012" ] (rocmPackages.clr.localGpuTargets or
#   rocmPackages.clr.gpuTargets)` (the scope's list: 15 targets in the default scope);
# - effectiveMagma = magma-cuda-static with CUDA, magma-hip with ROCm, else magma;
# - rocmtoolkit_joined links the scope's libraries; composable_kernel only when it has an MFMA
#   target (`vendorComposableKernel = rocmSupport && !rocmPackages.composable_kernel.anyMfmaTarget`);
# - broken with CUDA and ROCm ("CUDA and ROCm are mutually exclusive");
# - passthru rocmSupport, rocmPackages.
{
  config,
  stdenv,
  buildPythonPackage,
  cudaSupport ? config.cudaSupport,
  rocmSupport ? config.rocmSupport,
  cudaPackages,
  # The real recipe: effectiveMagma = magma-cuda-static with CUDA (the dynamic CUDA magma is
  # meta.broken), magma-hip with ROCm.
  magma-cuda-static,
  magma-hip,
  rocmPackages,
  numpy,
  gpuTargets ? [ ],
}:
let
  lib = import ./lib.nix;
  inherit (cudaPackages) cudnn flags nccl;
  effectiveMagma = if cudaSupport then magma-cuda-static else magma-hip;
  magma = effectiveMagma;

  # torch/source/default.nix brokenConditions (the ones the stand-in can meet).
  brokenConditions = {
    "CUDA and ROCm are mutually exclusive" = cudaSupport && rocmSupport;
    # torch 2.7.1 (00d0ced3) and 2.9.1 (6b516b42) accept CUDA majors 11 and 12 only; the 2.13
    # recipe widens it to 11/12/13. The pin's 2.12 recipe is not in the index: keep the
    # stricter rule (never more lenient); `capplan nixpkgs check` reads the pin's own.
    "Unsupported CUDA version" =
      cudaSupport
      && !(builtins.elem cudaPackages.cudaMajorVersion [
        "11"
        "12"
      ]);
  };
  # torch/source/default.nix: `useSystemNccl ? (cudaSupport && cudaPackages.nccl.meta.available
  # || rocmSupport)`: a pre-Thor Jetson torch builds without the system NCCL.
  useSystemNccl = cudaSupport && nccl.meta.available;

  # https://github.com/pytorch/pytorch/blob/v2.11.0/torch/utils/cpp_extension.py#L2407-L2410
  # (copied in nixpkgs as supportedTorchCudaCapabilities; no "f" capabilities, no 10.1).
  supportedTorchCudaCapabilities =
    let
      real = [
        "3.5"
        "3.7"
        "5.0"
        "5.2"
        "5.3"
        "6.0"
        "6.1"
        "6.2"
        "7.0"
        "7.2"
        "7.5"
        "8.0"
        "8.6"
        "8.7"
        "8.9"
        "9.0"
        "9.0a"
        "10.0"
        "10.0a"
        "10.3"
        "10.3a"
        "11.0"
        "11.0a"
        "12.0"
        "12.0a"
        "12.1"
        "12.1a"
      ];
      ptx = map (x: "${x}+PTX") real;
    in
    real ++ ptx;

  # lists.subtractLists a b = b - a (comment kept from the real file)
  supportedCudaCapabilities = lib.intersectLists flags.cudaCapabilities supportedTorchCudaCapabilities;
  unsupportedCudaCapabilities = lib.subtractLists supportedCudaCapabilities flags.cudaCapabilities;

  gpuArchWarner =
    supported: unsupported:
    lib.throwIf (supported == [ ]) (
      "No supported GPU targets specified. Requested GPU targets: "
      + builtins.concatStringsSep ", " unsupported
    ) supported;

  targets =
    if gpuTargets != [ ] then
      gpuTargets
    else if cudaSupport then
      gpuArchWarner supportedCudaCapabilities unsupportedCudaCapabilities
    else if rocmSupport then
      # "Remove RDNA1 gfx101x archs from default ROCm support list to avoid use of undeclared
      # identifier 'CK_BUFFER_RESOURCE_3RD_DWORD'"
      lib.subtractLists [
        "gfx1010"
        "gfx1012"
      ] (rocmPackages.clr.localGpuTargets or rocmPackages.clr.gpuTargets)
    else
      throw "No GPU targets specified";

  rocmOnly = rocmSupport && !cudaSupport;
  vendorComposableKernel = rocmSupport && !rocmPackages.composable_kernel.anyMfmaTarget;
  # rocmtoolkit_joined, reduced to the stand-in's libraries: every one is a store path of the
  # scope torch is built in.
  rocmLibraries = {
    clr = "${rocmPackages.clr}";
    rocminfo = "${rocmPackages.rocminfo}";
    rocm-runtime = "${rocmPackages.rocm-runtime}";
    rocm-comgr = "${rocmPackages.rocm-comgr}";
    rocblas = "${rocmPackages.rocblas}";
    hipblas = "${rocmPackages.hipblas}";
    hipblaslt = "${rocmPackages.hipblaslt}";
    miopen = "${rocmPackages.miopen}";
    composable_kernel = if vendorComposableKernel then null else "${rocmPackages.composable_kernel}";
  };
  gpuTargetString = builtins.concatStringsSep ";" targets;

  ptxTargets = map (t: builtins.head (builtins.match "(.*)\\+PTX" t)) (
    builtins.filter (t: builtins.match ".*\\+PTX" t != null) targets
  );
in
buildPythonPackage {
  pname = "torch";
  version = "2.12.0";
  pyproject = true;
  backendStdenv = if cudaSupport then cudaPackages.backendStdenv else null;
  requiredSystemFeatures = [ "big-parallel" ];
  env =
    if cudaSupport then
      { TORCH_CUDA_ARCH_LIST = gpuTargetString; }
    else if rocmSupport then
      { PYTORCH_ROCM_ARCH = gpuTargetString; }
    else
      { };
  dependencies = [ numpy ];
  record = {
    inherit cudaSupport;
  }
  // (
    if cudaSupport then
      {
        TORCH_CUDA_ARCH_LIST = gpuTargetString;
        ptx = ptxTargets;
        cuda = cudaPackages.cudaMajorMinorVersion;
        # What the package set asked for (config / flags), next to what torch really targets.
        configCudaCapabilities = flags.cudaCapabilities;
        configCudaForwardCompat = flags.cudaForwardCompat;
        inherit gpuTargets;
        cudaDependencies = {
          cudnn = "${cudnn}";
          nccl = if useSystemNccl then "${nccl}" else null;
          magma = "${magma}";
          cuda_cudart = "${cudaPackages.cuda_cudart}";
        };
      }
    else
      { }
  )
  // (
    if rocmOnly then
      {
        inherit rocmSupport gpuTargets;
        PYTORCH_ROCM_ARCH = gpuTargetString;
        rocm = rocmPackages.version;
        # No CUDA in a ROCm torch: no TORCH_CUDA_ARCH_LIST, no capabilities.
        cudaCapabilities = [ ];
        rocmDependencies = rocmLibraries // {
          magma = "${effectiveMagma}";
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
      rocmPackages
      gpuTargetString
      ;
    cudaCapabilities = if cudaSupport then supportedCudaCapabilities else [ ];
  };
  meta = {
    license = {
      shortName = "bsd3";
      free = true;
    };
    broken = builtins.any (x: x) (builtins.attrValues brokenConditions);
  };
}
