# The CUDA family: NVIDIA variants, each built in a nixpkgs instance whose config carries the
# plan's capability list, as real `pkgsCuda`/`pkgsForCudaArch` are (pkgs/top-level/variants.nix).
# Every family file returns the same set (see ./default.nix); this one names `"nvidia"`.
# builtins only, and from nixpkgs only what NIXPKGS.md lists (`config.cudaCapabilities`,
# `cudaForwardCompat`, `cudaPackages_X_Y.pkgs`, torch's `.override { gpuTargets; }`).
let
  common = import ./lib.nix;
  inherit (common) toJSON toLower replaceRe splitWords;
  inherit (builtins)
    all
    elem
    elemAt
    filter
    head
    length
    sort
    ;

  # core/families/cuda/gpus.py, for a loose name: the chip qualifier of a name sold on chips
  # of several capabilities ("GT 640 (GK208)"), the words vendors add, the line before its
  # number ("rtx3090"), the China "D" models ("4090d"). Python's `\b` is a padded
  # `[^a-z0-9_]` here (texts are ASCII).
  chipRe = "\\(((g[kmpvahb]|tu|ad)[0-9]{2,3}[a-z]?)\\)";
  noise = [
    "nvidia"
    "geforce"
    "tesla"
    "quadro"
    "graphics"
    "gpu"
  ];
  dModel = replaceRe "([^a-z0-9_])([0-9]{4})d([^a-z0-9_])" (
    m: "${elemAt m 0}${elemAt m 1} d${elemAt m 2}"
  );
  unique = builtins.foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];

  /**
    The models a loose name matches and the CLI's answer (gpus.py `find_gpus` and `_pick`):
    every word of the name in one of a model's names or aliases; then one capability, or an
    ambiguous name naming one model per capability. The exact names never get here (the
    names table answers them).
  */
  loose =
    {
      text,
      shown,
      section,
      ...
    }:
    let
      lower = toLower text;
      unchipped = replaceRe chipRe (_: " ") lower;
      lined = replaceRe "([^a-z0-9_])(rtx|gtx|gt|mx)([0-9])" (
        m: "${elemAt m 0}${elemAt m 1} ${elemAt m 2}"
      ) " ${unchipped}";
      wanted = filter (w: !(elem w noise)) (splitWords "[^a-z0-9.]+" (dModel (dModel "${lined} ")));
      noiseOnly = wanted == [ ];
      wantedSet = unique (
        if noiseOnly then filter (w: w != "nvidia") (splitWords "[^a-z0-9.]+" unchipped) else wanted
      );
      chips = map head (filter builtins.isList (builtins.split chipRe lower));
      n = length wantedSet;
      scoreOf =
        model: label:
        let
          words = if noiseOnly then label.noise else label.words;
          base = if label.qualified && chips == [ ] then 60 else if model.generated then 60 else 80;
          extra = length words - n;
        in
        if all (w: elem w words) wantedSet then
          base - (if extra < 19 then extra else 19) + (if !noiseOnly && label.words == wanted then 0.5 else 0)
        else
          null;
      best =
        model:
        builtins.foldl' (
          acc: label:
          let
            score = scoreOf model label;
          in
          if score != null && (acc == null || score > acc) then score else acc
        ) null model.labels;
      matches = sort (
        a: b:
        if a.score != b.score then
          a.score > b.score
        else if a.model.rank != b.model.rank then
          a.model.rank < b.model.rank
        else
          a.model.name < b.model.name
      ) (
        filter (m: m.score != null) (
          map (model: {
            inherit model;
            score = best model;
          }) (filter (m: all (c: elem c m.chips) chips) (section.models or [ ]))
        )
      );
      targets = unique (map (m: m.model.target) matches);
      # One model per capability, the best match of each, in capability order (`_pick`).
      perCap = map (r: head (filter (m: m.model.rank == r) matches)) (
        sort (a: b: a < b) (unique (map (m: m.model.rank) matches))
      );
    in
    # A capability spelling the names table lacks is no capability the knowledge base knows
    # (resolve_device parses it before any name).
    if
      builtins.match "[[:space:]]*([1-9][0-9]?[.][0-9][af]?|((sm|compute)_?)?[1-9][0-9]{1,2}[af]?)[[:space:]]*" lower
      != null
    then
      { error = "unknown capability '${shown}' (`capplan caps` lists the known ones)"; }
    else if wantedSet == [ ] || matches == [ ] then
      null
    else if length targets == 1 then
      {
        inherit ((head matches).model) target name;
      }
    else
      {
        error = "GPU name '${shown}' is ambiguous: it matches models of ${toString (length perCap)} capabilities: ${
          builtins.concatStringsSep ", " (
            map (m: "${m.model.name} (${m.model.target})") (
              builtins.genList (elemAt perCap) (if length perCap < 6 then length perCap else 6)
            )
          )
        }${
          if length perCap > 6 then " and ${toString (length perCap - 6)} more" else ""
        } (give a full model name, a capability such as \"8.6\" or a PCI id; `capplan gpus \"${shown}\"` lists the candidates)";
      };

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
    inherit loose;
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
