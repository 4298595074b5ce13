# The variant builder: turns overlays/plan.json (written by `capplan generate`) into package
# sets and derivations.  builtins only, and from nixpkgs only what NIXPKGS.md lists (`import
# <nixpkgs> { localSystem; crossSystem; config; overlays; }`, `pkgs.path`, `pkgs.config`,
# `pkgs.overlays`, `stdenv.hostPlatform`/`buildPlatform`, `cudaPackages_X_Y.pkgs`, the package
# attributes, `pythonPackagesExtensions` and torch's `.override { gpuTargets; }`), so the same
# code evaluates against real nixpkgs and the stand-in in tests/nixpkgs.  Nix >= 2.8.
let
  dispatchLib = import ./dispatch.nix;
  inherit (builtins)
    attrNames
    foldl'
    listToAttrs
    mapAttrs
    stringLength
    substring
    toJSON
    ;

  /**
    Check that a decoded plan.json has the one schema version this code understands.

    # Type

    ```
    checkPlan :: AttrSet -> AttrSet
    ```
  */
  checkPlan =
    plan:
    if (plan.version or null) != 1 then
      throw "capplan: plan.json has version ${toJSON (plan.version or null)}, this overlay reads version 1; regenerate it with `capplan generate`"
    else
      plan;

  /**
    The nixpkgs `config` of one variant: the base config with CUDA on and ROCm off (as real
    `pkgsCuda`/`pkgsForCudaArch` do, pkgs/top-level/variants.nix: torch is `meta.broken` with
    both), unfree allowed (CUDA is unfree, NIXPKGS.md section 2), the plan's sorted capability
    list (`[]` = the CUDA set's default list) and its instance's PTX choice as
    `cudaForwardCompat` (PTX for the last element).

    # Type

    ```
    variantConfig :: AttrSet -> Variant -> AttrSet
    ```

    # Example

    ```nix
    variantConfig { } { capabilities = [ "8.6" ]; forward_compat = false; ... }
    => { allowUnfree = true; cudaSupport = true; rocmSupport = false; cudaCapabilities = [ "8.6" ]; cudaForwardCompat = false; }
    ```
  */
  variantConfig =
    baseConfig: variant:
    baseConfig
    // {
      allowUnfree = true;
      cudaSupport = true;
      rocmSupport = false;
      cudaCapabilities = variant.capabilities;
      cudaForwardCompat = variant.forward_compat;
    };

  /**
    What `pkgs.capplan.configs` shows of a variant: only the keys capplan sets, plus the CUDA
    version, as plain data (real `pkgs.config` is an evaluated module with functions, so it
    cannot go through `builtins.toJSON`).
  */
  plainConfig = variant: {
    allowUnfree = true;
    cudaSupport = true;
    rocmSupport = false;
    cudaCapabilities = variant.capabilities;
    cudaForwardCompat = variant.forward_compat;
    cudaMajorMinorVersion = variant.cuda;
  };

  /**
    The overlay that puts the plan's PTX torch into every Python package set of an instance,
    so torchvision (which takes `torch` from its own set and has no `gpuTargets`,
    pkgs/development/python-modules/torchvision/default.nix) builds against that very torch.
    `pythonPackagesExtensions` is the top-level list every interpreter's package set applies
    (pkgs/development/interpreters/python/passthrufun.nix: `extensions = composeManyExtensions
    ([ hooks pythonExtension ] ++ pythonPackagesExtensions ++ [ overrides ])`).
  */
  gpuTargetsOverlay = gpuTargets: final: prev: {
    pythonPackagesExtensions = prev.pythonPackagesExtensions ++ [
      (pyFinal: pyPrev: {
        torch = pyPrev.torch.override { inherit gpuTargets; };
      })
    ];
  };

  /**
    Variants with the same key share one nixpkgs instance: the key is everything that goes
    into that instance (config and extra overlay). The planner gives every variant of one
    capability list the same key, so a dependency job is the derivation its dependents link.
  */
  instanceKey = variant: toJSON [
    # The system the instance is imported for (set on every variant by mkVariants).
    variant.system
    variant.capabilities
    variant.forward_compat
    variant.gpu_targets
  ];
  /**
    The package set a variant is built in: `<cuda_set>.pkgs` when the plan pins a non-default CUDA
    (NIXPKGS.md section 3), else the instance itself, after checking that nixpkgs' default CUDA
    is the one the plan assumed.
  */
  setOf =
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

  /**
    The package of one variant, taken from an instantiated package set: through
    `<cuda_set>.pkgs` when the plan pins a non-default CUDA, then the attribute path. A variant
    without a pinned set asserts that nixpkgs' default CUDA is the one the plan assumed.

    # Type

    ```
    selectPackage :: PackageSet -> Variant -> Derivation
    ```
  */
  selectPackage =
    pkgs: variant:
    let
      set = setOf pkgs variant;
    in
    foldl' (scope: name: scope.${name}) set variant.attr;

  /**
    The attribute name of a variant under its package: the variant name without the
    `<package>-` prefix (`torch-sm86` -> `sm86`), or `default` when the name is the package.
  */
  suffixOf =
    name: variant:
    let
      prefix = variant.package + "-";
      n = stringLength prefix;
    in
    if name == variant.package then
      "default"
    else if substring 0 n name == prefix then
      substring n (stringLength name - n) name
    else
      name;

  /**
    All variants of a plan, lazily: one nixpkgs instance per distinct config, created only
    when a variant that needs it is evaluated (evaluating `torch-sm86` never imports nixpkgs
    for any other config).

    # Type

    ```
    mkVariants :: {
      nixpkgs :: Path, plan :: AttrSet,
      config :: AttrSet ? {}, overlays :: [Overlay] ? [],
      localSystem :: AttrSet ? { system = <the variant's system>; }, crossSystem :: AttrSet ? null,
      system :: String ? null,
    } -> {
      packages :: AttrSet Derivation;            # by variant name: packages."torch-sm86"
      variants :: AttrSet (AttrSet Derivation);  # by package, then suffix: variants.torch.sm86
      configs :: AttrSet AttrSet;                # by variant name: plain data, see plainConfig
      plan :: AttrSet;
    }
    ```

    # Inputs

    `nixpkgs`
    : the nixpkgs source to import (`pkgs.path`, or a flake input)

    `config`, `overlays`, `localSystem`, `crossSystem`
    : what every variant is imported with, besides its CUDA settings (the overlay passes the
      package set's own, as real `pkgsForCudaArch` keeps them; the flake passes `{}`, `[]`
      and the plan's system)

    `plan`
    : the decoded overlays/plan.json

    `system`
    : only the variants planned for this Nix system, each imported for it (null: every
      variant, each imported for its own `system`)
  */
  mkVariants =
    {
      nixpkgs,
      config ? { },
      overlays ? [ ],
      localSystem ? null,
      crossSystem ? null,
      plan,
      # Only the variants planned for this system (null: every variant). A package set of one
      # system cannot build another system's variants, so the overlay and each flake output
      # pass their own.
      system ? null,
    }:
    let
      checked = checkPlan plan;
      # A plan.json without per-variant systems (written before plans had several) is for any
      # one system: the set's own when the overlay asks for one, else the plan's.
      withSystems = mapAttrs (
        _: v: { system = if system != null then system else checked.system; } // v
      ) checked.variants;
      selected =
        if system == null then
          withSystems
        else
          builtins.removeAttrs withSystems (
            builtins.filter (name: withSystems.${name}.system != system) (attrNames withSystems)
          );
      names = attrNames selected;
      # The overlay passes its set's own platforms; the flake lets each variant name its system.
      platformsOf =
        variant:
        {
          localSystem = if localSystem == null then { inherit (variant) system; } else localSystem;
        }
        // (if crossSystem == null then { } else { inherit crossSystem; });
      instances = listToAttrs (
        map (
          name:
          let
            variant = selected.${name};
          in
          {
            name = instanceKey variant;
            value = import nixpkgs (
              platformsOf variant
              // {
                config = variantConfig config variant;
                overlays =
                  overlays ++ (if variant.gpu_targets == [ ] then [ ] else [ (gpuTargetsOverlay variant.gpu_targets) ]);
              }
            );
          }
        ) names
      );
      packages = mapAttrs (_: variant: selectPackage instances.${instanceKey variant} variant) selected;
      # Dispatch outputs (pkgs/dispatch.nix) of this system's variants: each Python variant's
      # environment is built with `python3.withPackages` in the variant's own package set; the
      # builder's interpreter is any instance's python3 (it does not depend on CUDA settings).
      dispatchNames =
        if checked ? dispatch then
          builtins.filter (name: selected ? ${name}) (
            builtins.concatMap (p: map (v: v.name) checked.dispatch.packages.${p}.variants) (
              attrNames checked.dispatch.packages
            )
          )
        else
          [ ];
      envs = listToAttrs (
        map (name: {
          inherit name;
          value =
            let
              variant = selected.${name};
            in
            if dispatchLib.isPython variant then
              (setOf instances.${instanceKey variant} variant).python3.withPackages (_: [ packages.${name} ])
            else
              packages.${name};
        }) dispatchNames
      );
      dispatch =
        if dispatchNames == [ ] then
          { }
        else
          dispatchLib.mkDispatch {
            plan = checked;
            variants = packages;
            inherit envs;
            python = instances.${instanceKey selected.${builtins.head dispatchNames}}.python3;
          };
      byPackage = builtins.groupBy (name: selected.${name}.package) names;
      variants = mapAttrs (
        _: members:
        listToAttrs (
          map (name: {
            name = suffixOf name selected.${name};
            value = packages.${name};
          }) members
        )
      ) byPackage;
    in
    {
      inherit packages variants dispatch;
      configs = mapAttrs (_: plainConfig) selected;
      plan = checked;
    };

  /**
    An overlay adding `pkgs.capplan.{packages,variants,configs,dispatch,plan}` for the given plan. Each
    variant re-imports `prev.path` as real `pkgsForCudaArch` does (pkgs/top-level/stage.nix
    `nixpkgsFun`, variants.nix): the set's config plus the variant's CUDA settings, the set's
    own overlays (`pkgs.overlays`, so a user's patched magma reaches the variants) and its
    platforms (an aarch64 set gives aarch64 variants; a cross set stays cross, written as
    variants.nix's pkgsMusl writes it).

    # Type

    ```
    mkOverlay :: AttrSet -> (AttrSet -> AttrSet -> AttrSet)
    ```

    # Example

    ```nix
    import nixpkgs { overlays = [ (capplan.lib.mkOverlay (builtins.fromJSON (builtins.readFile ./plan.json))) ]; }
    ```
  */
  mkOverlay =
    plan: final: prev:
    let
      inherit (prev.stdenv) hostPlatform buildPlatform;
      native = hostPlatform == buildPlatform;
    in
    {
      capplan = mkVariants {
        nixpkgs = prev.path;
        config = prev.config;
        inherit (prev) overlays;
        localSystem = if native then hostPlatform else buildPlatform;
        crossSystem = if native then null else hostPlatform;
        inherit plan;
        # Only this package set's own system's variants (an aarch64 set gets torch-sm87-aarch64,
        # never the x86_64 torch-sm80).
        system = prev.stdenv.hostPlatform.system;
      };
    };
in
{
  inherit
    checkPlan
    variantConfig
    plainConfig
    gpuTargetsOverlay
    selectPackage
    suffixOf
    mkVariants
    mkOverlay
    ;
  inherit (dispatchLib) mkDispatch;
}
