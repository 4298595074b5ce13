# The CUDA family: NVIDIA variants, each built in a nixpkgs instance whose config carries the
# plan's capability list, as real `pkgsCuda`/`pkgsForCudaArch` are (pkgs/top-level/variants.nix).
# Every family file returns the same set (see ./default.nix); this one names `"nvidia"`.
# builtins only, and from nixpkgs only what NIXPKGS.md lists (`config.cudaCapabilities`,
# `cudaForwardCompat`, `cudaPackages_X_Y.pkgs`, torch's `.override { gpuTargets; }`).
let
  common = import ./lib.nix;
  inherit (common) toJSON;

  /**
    The package set a variant is built in: `<cuda_set>.pkgs` when the plan pins a non-default
    CUDA (NIXPKGS.md section 3), else the instance itself, after checking that nixpkgs' default
    CUDA is the one the plan assumed.
  */
  packageSet =
    pkgs: variant:
    let
      default = pkgs.cudaPackages.cudaMajorMinorVersion;
    in
    if variant.cuda_set != null then
      pkgs.${variant.cuda_set}.pkgs
    else if default == variant.cuda then
      pkgs
    else
      throw "capplan: this plan expects CUDA ${variant.cuda} as nixpkgs' default, the pinned nixpkgs has ${default}: regenerate with capplan generate";
in
{
  # The family's name in plan.json's `machine.families` (the planner's: core/families/cuda).
  name = "cuda";
  vendor = "nvidia";

  # How a machine's NVIDIA GPUs are found (../machine.nix): a capplan.gpus entry the exported
  # names table gives an NVIDIA answer (a model's name or alias, a capability spelling), or a
  # facter report's PCI id in the exported PCI table (kb/pci.json: device id -> capability).
  machine = {
    # Words an exact GPU key leaves out (core/families/cuda/gpus.py exact_key): "NVIDIA
    # GeForce RTX 3090" and "GeForce RTX 3090" are one name.
    keyDrops = [ "nvidia" ];
    target =
      { names, key, ... }:
      let
        found = names.${key} or null;
      in
      if found != null && (found.vendor or null) == "nvidia" then
        { inherit (found) target name; }
      else
        null;
    pciVendor = "10de";
    fromPci =
      section: gpu:
      let
        cap = ((section.pci or { }).devices or { }).${gpu.device} or null;
      in
      if cap == null then
        {
          error = "capplan: the facter report's NVIDIA GPU 10de:${gpu.device} (${gpu.model}) is not in capplan's PCI table (kb/pci.json): name it in capplan.gpus, e.g. its capability, and report the id with the output of `lspci -nn -d 10de:`";
        }
      else
        {
          target = cap;
          name = gpu.model;
        };
  };
  # Its place among the families (./default.nix `all`): the registry's order.
  rank = 0;
  # How the unknown-vendor line lists this family's `vendor`.
  vendorText = ''"nvidia"'';

  /**
    An NVIDIA variant carries no ROCm and no CPU keys (`rocm = null` or no `rocm` key).
  */
  check =
    name: variant:
    let
      rocm = variant.rocm or null;
      cpu = variant.cpu or null;
    in
    if rocm != null then
      common.fail name "an NVIDIA variant has rocm ${toJSON rocm}, expected null"
    else if cpu != null then
      common.fail name "an NVIDIA variant has cpu ${toJSON cpu}, expected null (CPU levels are planned for CPU-side packages only)"
    else
      variant;

  /**
    The base config with CUDA on and ROCm off (as real `pkgsCuda`/`pkgsForCudaArch` do,
    pkgs/top-level/variants.nix: torch is `meta.broken` with both), unfree allowed (CUDA is
    unfree, NIXPKGS.md section 2), the plan's sorted capability list (`[]` = the CUDA set's
    default list) and its instance's PTX choice as `cudaForwardCompat` (PTX for the last
    element).
  */
  config =
    baseConfig: variant:
    baseConfig
    // {
      allowUnfree = true;
      cudaSupport = true;
      rocmSupport = false;
      cudaCapabilities = variant.capabilities;
      cudaForwardCompat = variant.forward_compat;
    };

  plainConfig = variant: {
    allowUnfree = true;
    cudaSupport = true;
    rocmSupport = false;
    cudaCapabilities = variant.capabilities;
    cudaForwardCompat = variant.forward_compat;
    cudaMajorMinorVersion = variant.cuda;
  };

  # The plan's PTX torch (`gpu_targets`, "8.6+PTX") in every Python set of the instance.
  overlays =
    name: variant:
    if variant.gpu_targets == [ ] then [ ] else [ (common.gpuTargetsOverlay variant.gpu_targets) ];

  /**
    Everything that goes into the instance (config and extra overlay): the planner gives every
    variant of one capability list the same key, so a dependency job is the derivation its
    dependents link.
  */
  instanceKey =
    variant:
    toJSON [
      # The system the instance is imported for (set on every variant by mkVariants).
      variant.system
      (variant.capabilities or null)
      (variant.forward_compat or null)
      (variant.gpu_targets or null)
    ];

  inherit packageSet;

  package = { variant, pkgs, ... }: common.select (packageSet pkgs variant) variant;

  # Dispatch wrappers start CUDA variants.
  dispatch = name: name;

  # Every CUDA variant is nixpkgs' own package, rebuilt in another instance.
  ownOutputs = _variant: null;
}
