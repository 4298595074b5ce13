# The variant builder: turns overlays/plan.json (written by `capplan generate`) into package
# sets and derivations.  What a variant's target family does (its checks, its nixpkgs config,
# its overlays, which variants share an instance, where its package comes from) lives in that
# family's file, pkgs/families/{cuda,rocm,cpu}.nix, looked up in the table
# pkgs/families/default.nix by the variant's `vendor`; this file holds what every family shares.
# builtins only, and from nixpkgs only what NIXPKGS.md lists (`import <nixpkgs> { localSystem;
# crossSystem; config; overlays; }`, `pkgs.path`, `pkgs.config`, `pkgs.overlays`,
# `stdenv.hostPlatform`/`buildPlatform`, and what each family file names), so the same code
# evaluates against real nixpkgs and the stand-in in tests/nixpkgs.  Nix >= 2.8.
let
  dispatchLib = import ./dispatch.nix;
  families = import ./families;
  common = import ./families/lib.nix;
  inherit (builtins)
    attrNames
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

  # The families by the `vendor` value their variants carry (toJSON: `null` is a vendor too).
  byVendor = listToAttrs (
    map (family: {
      name = toJSON family.vendor;
      value = family;
    }) families.all
  );

  vendorOf = variant: if variant ? vendor then variant.vendor else families.unmarked.vendor;

  /**
    The family of a variant. A variant without a `vendor` key is from a plan written before the
    key existed: the unmarked family's. A vendor no family reads is refused by checkVariant
    only; everything that reads unchecked data (the instance keys, the dispatch list) treats it
    as the unmarked family's, so a bad variant fails alone, with its own line.
  */
  familyOf = variant: byVendor.${toJSON (vendorOf variant)} or families.unmarked;

  /**
    A plan.json variant, checked by its family for the keys that family reads: one clear
    `capplan:` line for data it does not understand (the planner writes valid data; a
    hand-edited or newer plan.json may not).
  */
  checkVariant =
    name: variant:
    let
      known = map (f: f.vendorText) families.all;
      last = builtins.length known - 1;
      listed =
        builtins.concatStringsSep ", " (builtins.genList (builtins.elemAt known) last)
        + " or ${builtins.elemAt known last}";
    in
    if byVendor ? ${toJSON (vendorOf variant)} then
      (familyOf variant).check name variant
    else
      common.fail name "vendor is ${toJSON (vendorOf variant)}, this overlay reads ${listed}";

  /**
    The nixpkgs `config` of one variant: the base config with its family's keys (CUDA: as real
    `pkgsForCudaArch`, with the plan's capability list and PTX choice; ROCm: as real
    `pkgsRocm`; CPU: the base config itself).

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
  variantConfig = baseConfig: variant: (familyOf variant).config baseConfig variant;

  /**
    What `pkgs.capplan.configs` shows of a variant: only the keys capplan sets, plus the CUDA
    version, as plain data (real `pkgs.config` is an evaluated module with functions, so it
    cannot go through `builtins.toJSON`).
  */
  plainConfig = variant: (familyOf variant).plainConfig variant;

  /**
    Variants with the same key share one nixpkgs instance: the key is everything that goes
    into that instance (config and extra overlay), as the variant's family computes it.
  */
  instanceKey = variant: (familyOf variant).instanceKey variant;

  /**
    The package of one variant, taken from an instantiated package set: through the set its
    family builds it in (`<cuda_set>.pkgs` when the plan pins a non-default CUDA), then the
    attribute path. A CUDA variant without a pinned set asserts that nixpkgs' default CUDA is
    the one the plan assumed.

    # Type

    ```
    selectPackage :: PackageSet -> Variant -> Derivation
    ```
  */
  selectPackage = pkgs: variant: common.select ((familyOf variant).packageSet pkgs variant) variant;

  /**
    The output names of a variant its family builds with a builder of its own (a -hwcaps
    output: `[ "out" ]`), or null when it is nixpkgs' package (its outputs are the default
    set's): hydraJobs' job records answer `nix flake show` with them without importing the
    variant's instance.
  */
  ownOutputs = variant: (familyOf variant).ownOutputs variant;

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
      # Each variant checked when it is used (a bad one fails alone, with its name).
      valid = mapAttrs checkVariant selected;
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
            variant = valid.${name};
          in
          {
            # The key reads the unchecked data, so listing the instances checks no variant.
            name = instanceKey selected.${name};
            value = import nixpkgs (
              platformsOf variant
              // {
                config = (familyOf variant).config config variant;
                overlays = overlays ++ (familyOf variant).overlays name variant;
              }
            );
          }
        ) names
      );
      packages = mapAttrs (
        name: variant:
        (familyOf variant).package {
          inherit name variant packages selected;
          pkgs = instances.${instanceKey selected.${name}};
        }
      ) valid;
      # Dispatch outputs (pkgs/dispatch.nix) of this system's variants: each Python variant's
      # environment is built with `python3.withPackages` in the variant's own package set; the
      # builder's interpreter is any instance's python3 (it does not depend on CUDA settings).
      # A family whose variants have no dispatch wrapper (ROCm) refuses them by name.
      dispatchNames =
        if checked ? dispatch then
          map (name: (familyOf selected.${name}).dispatch name) (
            builtins.filter (name: selected ? ${name}) (
              builtins.concatMap (p: map (v: v.name) checked.dispatch.packages.${p}.variants) (
                attrNames checked.dispatch.packages
              )
            )
          )
        else
          [ ];
      envs = listToAttrs (
        map (name: {
          inherit name;
          value =
            let
              variant = valid.${name};
            in
            if dispatchLib.isPython variant then
              ((familyOf variant).packageSet instances.${instanceKey variant} variant).python3.withPackages (_: [ packages.${name} ])
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
      configs = mapAttrs (_: plainConfig) valid;
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
  inherit (common) addCflags gpuTargetsOverlay;
  inherit
    checkPlan
    checkVariant
    variantConfig
    plainConfig
    selectPackage
    ownOutputs
    suffixOf
    mkVariants
    mkOverlay
    ;
  inherit (dispatchLib) mkDispatch;
}
