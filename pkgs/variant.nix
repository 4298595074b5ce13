# The variant builder: turns overlays/plan.json (written by `capplan generate`) into package
# sets and derivations.  builtins only, and from nixpkgs only what NIXPKGS.md lists (`import
# <nixpkgs> { system; config; }`, `cudaPackages_X_Y.pkgs`, the package attributes and torch's
# `.override { gpuTargets; }`), so the same code evaluates against real nixpkgs and the stand-in
# in tests/nixpkgs.
let
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
    The nixpkgs `config` of one variant: the base config with CUDA on, unfree allowed (CUDA is
    unfree, NIXPKGS.md section 2), the plan's sorted capability list (`[]` = the CUDA set's
    default list) and its PTX choice as `cudaForwardCompat` (PTX for the last element).

    # Type

    ```
    variantConfig :: AttrSet -> Variant -> AttrSet
    ```

    # Example

    ```nix
    variantConfig { } { capabilities = [ "8.6" ]; forward_compat = false; ... }
    => { allowUnfree = true; cudaSupport = true; cudaCapabilities = [ "8.6" ]; cudaForwardCompat = false; }
    ```
  */
  variantConfig =
    baseConfig: variant:
    baseConfig
    // {
      allowUnfree = true;
      cudaSupport = true;
      cudaCapabilities = variant.capabilities;
      cudaForwardCompat = variant.forward_compat;
    };

  /**
    Variants with the same key can share one nixpkgs instance: the key is everything that goes
    into that instance's config.
  */
  instanceKey = variant: toJSON [
    # The system the instance is imported for (set on every variant by mkVariants).
    variant.system
    variant.capabilities
    variant.forward_compat
  ];
  /**
    The package of one variant, taken from an instantiated package set: through
    `<cuda_set>.pkgs` when the plan pins a non-default CUDA, then the attribute path, then
    `.override { gpuTargets; }` when the plan lists explicit targets (torch embeds PTX only so).

    # Type

    ```
    selectPackage :: PackageSet -> Variant -> Derivation
    ```
  */
  selectPackage =
    pkgs: variant:
    let
      set = if variant.cuda_set == null then pkgs else pkgs.${variant.cuda_set}.pkgs;
      pkg = foldl' (scope: name: scope.${name}) set variant.attr;
    in
    if variant.gpu_targets == [ ] then pkg else pkg.override { gpuTargets = variant.gpu_targets; };

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
    mkVariants :: { nixpkgs :: Path, config :: AttrSet ? {}, plan :: AttrSet, system :: String ? null } -> {
      packages :: AttrSet Derivation;            # by variant name: packages."torch-sm86"
      variants :: AttrSet (AttrSet Derivation);  # by package, then suffix: variants.torch.sm86
      configs :: AttrSet AttrSet;                # by variant name: the nixpkgs config used
      plan :: AttrSet;
    }
    ```

    # Inputs

    `nixpkgs`
    : the nixpkgs source to import (`pkgs.path`, or a flake input)

    `config`
    : the base config the variants start from (`pkgs.config` in the overlay, `{}` in the flake)

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
      plan,
      # Only the variants planned for this system (null: every variant). A package set of one
      # system cannot build another system's variants, so the overlay and each flake output
      # pass their own.
      system ? null,
    }:
    let
      checked = checkPlan plan;
      # A plan.json without per-variant systems (one-system plans) gives each variant the
      # plan's system.
      withSystems = mapAttrs (_: v: { system = checked.system; } // v) checked.variants;
      selected =
        if system == null then
          withSystems
        else
          builtins.removeAttrs withSystems (
            builtins.filter (name: withSystems.${name}.system != system) (attrNames withSystems)
          );
      names = attrNames selected;
      configs = mapAttrs (_: variantConfig config) selected;
      instances = listToAttrs (
        map (name: {
          name = instanceKey selected.${name};
          value = import nixpkgs {
            inherit (selected.${name}) system;
            config = configs.${name};
          };
        }) names
      );
      packages = mapAttrs (_: variant: selectPackage instances.${instanceKey variant} variant) selected;
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
      inherit
        packages
        variants
        configs
        ;
      plan = checked;
    };

  /**
    An overlay adding `pkgs.capplan.{packages,variants,configs,plan}` for the given plan; each
    variant re-imports `prev.path` with `prev.config` plus the variant's CUDA settings.

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
    {
      capplan = mkVariants {
        nixpkgs = prev.path;
        # `pkgs.config` is the resolved config of the set the overlay is applied to (real
        # variants.nix builds pkgsForCudaArch from `super.config` the same way).
        config = prev.config or { };
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
    selectPackage
    suffixOf
    mkVariants
    mkOverlay
    ;
}
