# The variant builder: turns overlays/plan.json (written by `capplan generate`) into package
# sets and derivations.  builtins only, and from nixpkgs only what NIXPKGS.md lists (`import
# <nixpkgs> { localSystem; crossSystem; config; overlays; }`, `pkgs.path`, `pkgs.config`,
# `pkgs.overlays`, `stdenv.hostPlatform`/`buildPlatform`, `cudaPackages_X_Y.pkgs`, the package
# attributes, `pythonPackagesExtensions` and torch's `.override { gpuTargets; }`; for AMD
# variants the config key `rocmSupport`, the per-target scopes `rocmPackages.<scope>` and a
# package's `.override { gpuTargets; }`, checked against the arguments `.override` carries), so the same code evaluates against real nixpkgs and the
# stand-in in tests/nixpkgs.  Nix >= 2.8.
let
  dispatchLib = import ./dispatch.nix;
  hwcapsBuilder = ./hwcaps_builder.py;
  inherit (builtins)
    attrNames
    foldl'
    listToAttrs
    mapAttrs
    stringLength
    substring
    toJSON
    ;

  # lib.functionArgs (lib/trivial.nix), written with builtins: a package's `.override` is a
  # functor made by lib.mirrorFunctionArgs that carries the recipe's arguments, which plain
  # builtins.functionArgs refuses ("value is a set while a lambda was expected").
  functionArgs =
    f:
    if f ? __functor then f.__functionArgs or (functionArgs (f.__functor f)) else builtins.functionArgs f;

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
    The vendor of a variant: plans written before AMD variants have no `vendor` key (NVIDIA);
    a CPU-side variant (a package no GPU family builds: generic, per CPU level, or `-hwcaps`)
    has `"vendor": null` and is built in a plain package set.
  */
  vendorOf = variant: if variant ? vendor then variant.vendor else "nvidia";
  isAmd = variant: vendorOf variant == "amd";
  isCpu = variant: vendorOf variant == null;
  cpuOf = variant: variant.cpu or null;
  isHwcaps = variant: isCpu variant && (cpuOf variant) ? hwcaps;

  /**
    A plan.json variant, checked for the keys this file reads about its vendor: one clear
    `capplan:` line for data it does not understand (the planner writes valid data; a
    hand-edited or newer plan.json may not).  AMD variants carry
    `rocm = { scope = "package" | "stack"; scope_attr; targets; overrides; arguments ? {};
    scope_overrides ? {}; }`; NVIDIA ones
    `rocm = null` or no `rocm` key.
  */
  checkVariant =
    name: variant:
    let
      vendor = vendorOf variant;
      rocm = variant.rocm or null;
      fail = msg: throw "capplan: plan.json variant ${name}: ${msg} (regenerate overlays/plan.json with `capplan generate`)";
      isStringList = v: builtins.isList v && builtins.all builtins.isString v;
      checkRocm =
        if !(builtins.isAttrs rocm) then
          fail "vendor \"amd\" needs a \"rocm\" object, got ${toJSON rocm}"
        else if !(builtins.elem (rocm.scope or null) [
          "package"
          "stack"
        ]) then
          fail "rocm.scope is ${toJSON (rocm.scope or null)}, this overlay reads \"package\" or \"stack\""
        else if rocm.scope == "stack" && !(builtins.isString (rocm.scope_attr or null)) then
          fail "rocm.scope \"stack\" needs rocm.scope_attr naming a per-target scope such as \"gfx942\", got ${toJSON (rocm.scope_attr or null)}"
        else if rocm.scope == "package" && (rocm.scope_attr or null) != null then
          fail "rocm.scope \"package\" takes no rocm.scope_attr, got ${toJSON rocm.scope_attr}"
        else if !(isStringList (rocm.targets or null)) then
          fail "rocm.targets must be a list of strings, got ${toJSON (rocm.targets or null)}"
        else if
          !(builtins.isAttrs (rocm.overrides or null))
          || !(builtins.all isStringList (builtins.attrValues rocm.overrides))
        then
          fail "rocm.overrides must map package names to lists of strings, got ${toJSON (rocm.overrides or null)}"
        else if
          !(builtins.isAttrs (rocm.arguments or { }))
          || !(builtins.all builtins.isString (builtins.attrValues (rocm.arguments or { })))
          || !(builtins.all (n: rocm.overrides ? ${n}) (attrNames (rocm.arguments or { })))
        then
          fail "rocm.arguments must map names of rocm.overrides to argument names such as \"rocmGpuTargets\", got ${toJSON (rocm.arguments or null)}"
        else if
          !(builtins.isAttrs (rocm.scope_overrides or { }))
          || !(builtins.all builtins.isAttrs (builtins.attrValues (rocm.scope_overrides or { })))
          || !(builtins.all (args: builtins.all builtins.isBool (builtins.attrValues args)) (
            builtins.attrValues (rocm.scope_overrides or { })
          ))
        then
          fail "rocm.scope_overrides must map ROCm library names to objects of boolean arguments such as {\"miopen\": {\"withComposableKernel\": false}}, got ${toJSON (rocm.scope_overrides or null)}"
        else if rocm.scope != "stack" && (rocm.scope_overrides or { }) != { } then
          fail "rocm.scope_overrides needs rocm.scope \"stack\" (it changes libraries of a per-target scope), got ${toJSON rocm.scope_overrides}"
        else if (variant.gpu_targets or [ ]) != [ ] then
          fail "an AMD variant takes its targets from rocm.overrides, not gpu_targets ${toJSON variant.gpu_targets}"
        else
          variant;
      cpu = cpuOf variant;
      checkCpu =
        if rocm != null || (variant.capabilities or [ ]) != [ ] || (variant.gpu_targets or [ ]) != [ ] then
          fail "a CPU-side variant (vendor null) takes no GPU targets, got capabilities ${toJSON (variant.capabilities or [ ])}, gpu_targets ${toJSON (variant.gpu_targets or [ ])}, rocm ${toJSON rocm}"
        else if cpu == null then
          variant
        else if !(builtins.isAttrs cpu) then
          fail "cpu must be null or an object, got ${toJSON cpu}"
        else if cpu ? hwcaps then
          (
            if
              !(builtins.isAttrs cpu.hwcaps)
              || cpu.hwcaps == { }
              || !(builtins.all builtins.isString (builtins.attrValues cpu.hwcaps))
              || !(builtins.all (l: builtins.elem l hwcapsLevels) (attrNames cpu.hwcaps))
            then
              fail "cpu.hwcaps must map x86-64 psABI levels (${toJSON hwcapsLevels}) to variant names, got ${toJSON cpu.hwcaps}"
            else
              variant
          )
        else if !(builtins.isString (cpu.target or null)) then
          fail "cpu.target must be a string, got ${toJSON (cpu.target or null)}"
        else if !(builtins.elem (cpu.mechanism or null) [
          "override"
          "cflags"
        ]) then
          fail "cpu.mechanism is ${toJSON (cpu.mechanism or null)}, this overlay reads \"override\" or \"cflags\""
        else if !(builtins.isAttrs (cpu.override or null)) then
          fail "cpu.override must be an object of package arguments, got ${toJSON (cpu.override or null)}"
        else if !(isStringList (cpu.cflags or null)) then
          fail "cpu.cflags must be a list of strings, got ${toJSON (cpu.cflags or null)}"
        else if cpu.mechanism == "override" && cpu.override == { } then
          fail "cpu.mechanism \"override\" needs the package arguments in cpu.override"
        else if cpu.mechanism == "cflags" && cpu.cflags == [ ] then
          fail "cpu.mechanism \"cflags\" needs compiler flags in cpu.cflags"
        else if !(builtins.isString (cpu.gccarch or null)) || builtins.match "[A-Za-z0-9][A-Za-z0-9._+-]*" cpu.gccarch == null then
          fail "cpu.gccarch must be GCC's name of the target (the gccarch-<arch> system feature), got ${toJSON (cpu.gccarch or null)}"
        else
          variant;
    in
    if vendor == "nvidia" then
      (
        if rocm != null then
          fail "an NVIDIA variant has rocm ${toJSON rocm}, expected null"
        else if cpuOf variant != null then
          fail "an NVIDIA variant has cpu ${toJSON (cpuOf variant)}, expected null (CPU levels are planned for CPU-side packages only)"
        else
          variant
      )
    else if vendor == "amd" then
      (
        if cpuOf variant != null then
          fail "an AMD variant has cpu ${toJSON (cpuOf variant)}, expected null"
        else
          checkRocm
      )
    else if vendor == null then
      checkCpu
    else
      fail "vendor is ${toJSON vendor}, this overlay reads \"nvidia\", \"amd\" or null (CPU-side)";

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
    if isCpu variant then
      # A CPU-side variant: the set's own config; its CPU target comes from its overlay, which
      # touches that one package (never `gcc.arch`, which would rebuild the whole set).
      baseConfig
    else if isAmd variant then
      # An AMD variant: real `pkgsRocm` (variants.nix: `config = super.config // { cudaSupport =
      # false; rocmSupport = true; }`); ROCm is free software, so allowUnfree is left alone.
      # nixpkgs has no config key for GPU targets: they come from the overlays (rocmOverlays).
      baseConfig
      // {
        cudaSupport = false;
        rocmSupport = true;
      }
    else
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
  plainConfig =
    variant:
    if isCpu variant then
      {
        cpuTarget = (cpuOf variant).target or null;
        cpuMechanism = (cpuOf variant).mechanism or (if isHwcaps variant then "hwcaps" else null);
        cpuOverride = (cpuOf variant).override or { };
        cpuCflags = (cpuOf variant).cflags or [ ];
      }
    else if isAmd variant then
      {
        cudaSupport = false;
        rocmSupport = true;
        rocmScope = variant.rocm.scope;
        rocmScopeAttr = variant.rocm.scope_attr;
        gpuTargets = variant.rocm.targets;
      }
    else
      {
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
    The overlays of an AMD variant's package set, from plan data only (names and lists, never
    Nix text):
    - `rocm.scope = "stack"`: `rocmPackages = rocmPackages.<scope_attr>` (a per-target scope of
      pkgs/development/rocm-modules/default.nix), so every target-dependent library, torch
      (whose PYTORCH_ROCM_ARCH is then the scope's list) and magma-hip are built against that one
      ROCm stack (what nixpkgs' own rocm-tests does with `rocmPackages = self`);
      `rocm.scope_overrides` changes libraries inside that scope (`overrideScope`), so every
      consumer of the scope sees the same one: `{ miopen = { withComposableKernel = false; }; }`
      for a scope without a gfx9 target, where ROCm 7.x MIOpen's default (`withComposableKernel ?
      true`, pkgs/development/rocm-modules/miopen/default.nix) would link composable_kernel,
      which is `meta.broken = !anyGfx9Target` (composable_kernel/default.nix);
    - `rocm.overrides`: `torch` -> gpuTargetsOverlay (inside the Python set, so torchvision gets
      that torch); any other NAME -> `NAME = prev.NAME.override { <argument> = <list>; }` (the
      list as given: magma-hip takes magma's own spelling, "1030", pkgs/by-name/ma/magma), where
      <argument> is `rocm.arguments.NAME` or `gpuTargets` (llama-cpp and ollama take
      `rocmGpuTargets`: pkgs/by-name/ll/llama-cpp/package.nix, pkgs/by-name/ol/ollama/package.nix).
  */
  rocmOverlays =
    name: variant:
    let
      inherit (variant) rocm;
      fail = msg: throw "capplan: plan.json variant ${name}: ${msg} (regenerate overlays/plan.json with `capplan generate` against this nixpkgs)";
      # A per-target scope is a ROCm package set whose clr has localGpuTargets (default.nix
      # scopeForArches); anything else under rocmPackages (a package, the default scope's own
      # attributes) is refused by name.
      isScope = s: builtins.isAttrs s && s ? clr && s.clr ? localGpuTargets;
      # Only gfx* names are looked at: other attributes of real rocmPackages include aliases
      # that throw when evaluated.
      scopeNames =
        rocmPackages:
        builtins.filter (n: builtins.match "gfx[0-9a-z]+" n != null && isScope rocmPackages.${n}) (
          attrNames rocmPackages
        );
      scopeOverrides = rocm.scope_overrides or { };
      changed =
        scope:
        let
          # Checked before the scope is made: an attribute of the new scope is only forced by
          # a package that links it, so a wrong name would otherwise be ignored in silence.
          missing = builtins.filter (library: !(scope ? ${library})) (attrNames scopeOverrides);
        in
        if scopeOverrides == { } then
          scope
        else if missing != [ ] then
          fail "rocm.scope_overrides names ${toJSON (builtins.head missing)}, which rocmPackages.${rocm.scope_attr} does not have"
        else
          scope.overrideScope (
            _final: prev: builtins.mapAttrs (library: args: prev.${library}.override args) scopeOverrides
          );
      stack = final: prev: {
        rocmPackages =
          if prev.rocmPackages ? ${rocm.scope_attr} && isScope prev.rocmPackages.${rocm.scope_attr} then
            changed prev.rocmPackages.${rocm.scope_attr}
          else
            fail "rocm.scope_attr ${toJSON rocm.scope_attr} is not a per-target scope of this nixpkgs' rocmPackages (it has ${toJSON (scopeNames prev.rocmPackages)})";
      };
      arguments = rocm.arguments or { };
      override =
        package: gpuTargets:
        if package == "torch" then
          gpuTargetsOverlay gpuTargets
        else
          # Only where nixpkgs has the package (checkInstance names a missing one).
          final: prev:
          let
            argument = arguments.${package} or "gpuTargets";
            takes = functionArgs prev.${package}.override;
          in
          # The set's shape depends on `prev ? package` only (no value is forced to build it).
          if prev ? ${package} then
            {
              ${package} =
                if takes ? ${argument} then
                  prev.${package}.override { ${argument} = gpuTargets; }
                else
                  fail "${package}'s recipe takes no argument ${argument} (it takes ${toJSON (attrNames takes)}; `capplan nixpkgs check` lists every such drift)";
            }
          else
            { };
    in
    (if rocm.scope == "stack" then [ stack ] else [ ])
    ++ map (package: override package rocm.overrides.${package}) (attrNames rocm.overrides);

  /**
    The glibc-hwcaps subdirectories glibc 2.33+ searches on x86-64 (elf/dl-hwcaps.h,
    sysdeps/x86/dl-hwcaps): the psABI levels, best first at load time.
  */
  hwcapsLevels = [
    "x86-64-v2"
    "x86-64-v3"
    "x86-64-v4"
  ];

  /**
    The compiler flags of a `cflags` CPU variant added to one derivation's NIX_CFLAGS_COMPILE,
    where the derivation keeps it: top level (as older recipes set it) or in `env` (as newer
    ones do); make-derivation.nix refuses the same name in both, so the flags go where the
    recipe has it, else into `env`.
  */
  addCflags =
    flags: old:
    let
      join = before: toString ((if before == "" then [ ] else [ before ]) ++ flags);
    in
    if old ? NIX_CFLAGS_COMPILE then
      { NIX_CFLAGS_COMPILE = join (toString old.NIX_CFLAGS_COMPILE); }
    else
      {
        env = (old.env or { }) // {
          NIX_CFLAGS_COMPILE = join (toString ((old.env or { }).NIX_CFLAGS_COMPILE or ""));
        };
      };

  /**
    The overlay of a CPU-level variant, from plan data only: the package at the variant's
    `attr` rebuilt for its target, either through its own arguments (`mechanism = "override"`:
    `gromacs.override { cpuAcceleration = "AVX2_256"; }`) or with compiler flags for that one
    package (`mechanism = "cflags"`: `overrideAttrs` adding `-march=x86-64-v3` to
    NIX_CFLAGS_COMPILE). A top-level attribute is replaced in the set; a Python package
    (`python3Packages.NAME`) through `pythonPackagesExtensions`, so its dependents in the set
    use it too. Nothing else rebuilds.
  */
  cpuOverlays =
    name: variant:
    let
      cpu = cpuOf variant;
      rebuilt =
        package:
        if cpu.mechanism == "override" then
          package.override cpu.override
        else
          package.overrideAttrs (addCflags cpu.cflags);
      # make-derivation.nix gives every derivation of a set with `gcc.arch` the system feature
      # `gccarch-<arch>` (`requiredSystemFeatures = attrs.requiredSystemFeatures or [ ] ++ [
      # "gccarch-${stdenv.hostPlatform.gcc.arch}" ]`), so only a builder whose CPU runs that code
      # (it declares the feature) builds it and runs its tests; the same for this one package,
      # keeping the recipe's own features (big-parallel).
      change =
        package:
        (rebuilt package).overrideAttrs (old: {
          requiredSystemFeatures = (old.requiredSystemFeatures or [ ]) ++ [ "gccarch-${cpu.gccarch}" ];
        });
      attr = variant.attr;
      fail = msg: throw "capplan: plan.json variant ${name}: ${msg} (regenerate overlays/plan.json with `capplan generate`)";
    in
    if cpu == null || isHwcaps variant then
      [ ]
    else if builtins.length attr == 1 then
      [
        (final: prev: {
          ${builtins.head attr} =
            if prev ? ${builtins.head attr} then
              change prev.${builtins.head attr}
            else
              fail "this nixpkgs has no ${builtins.head attr}";
        })
      ]
    else if builtins.length attr == 2 && builtins.head attr == "python3Packages" then
      [
        (final: prev: {
          pythonPackagesExtensions = prev.pythonPackagesExtensions ++ [
            (pyFinal: pyPrev: {
              ${builtins.elemAt attr 1} = change pyPrev.${builtins.elemAt attr 1};
            })
          ];
        })
      ]
    else
      fail "a CPU-level variant's attr must be a top-level package or python3Packages.NAME, got ${toJSON attr}";

  /**
    An AMD variant's instance has every package its rocm.overrides name (the overlay only
    overrides what exists, so a name nixpkgs lacks would otherwise be ignored in silence).
  */
  checkInstance =
    name: variant: pkgs:
    if !(isAmd variant) then
      true
    else
      foldl' (
        ok: package:
        if package == "torch" || pkgs ? ${package} then
          ok
        else
          throw "capplan: plan.json variant ${name}: rocm.overrides names ${toJSON package}, which this nixpkgs does not have (regenerate overlays/plan.json with `capplan generate` against this nixpkgs)"
      ) true (attrNames variant.rocm.overrides);

  /**
    The overlays a variant's instance is imported with, besides the base set's own.
  */
  variantOverlays =
    name: variant:
    if isCpu variant then
      cpuOverlays name variant
    else if isAmd variant then
      rocmOverlays name variant
    else if variant.gpu_targets == [ ] then
      [ ]
    else
      [ (gpuTargetsOverlay variant.gpu_targets) ];

  /**
    Variants with the same key share one nixpkgs instance: the key is everything that goes
    into that instance (config and extra overlay). The planner gives every variant of one
    capability list the same key, so a dependency job is the derivation its dependents link.
    AMD variants: one instance per (system, scope_attr, overrides): the ROCm config is the same
    for all of them.
  */
  instanceKey =
    variant:
    if isCpu variant then
      # Generic CPU-side builds and -hwcaps outputs share the plain set; each CPU-level
      # variant has its own (its overlay changes one package).
      toJSON [
        variant.system
        "cpu"
        (if isHwcaps variant then null else (cpuOf variant))
        (if (cpuOf variant) == null || isHwcaps variant then null else variant.attr)
      ]
    else if isAmd variant then
      toJSON [
        variant.system
        "amd"
        (variant.rocm.scope_attr or null)
        (variant.rocm.overrides or null)
        (variant.rocm.arguments or { })
        (variant.rocm.scope_overrides or { })
      ]
    else
      toJSON [
        # The system the instance is imported for (set on every variant by mkVariants).
        variant.system
        (variant.capabilities or null)
        (variant.forward_compat or null)
        (variant.gpu_targets or null)
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
    # An AMD or CPU-side variant (cuda null) is built in its instance itself: no CUDA to check.
    if isAmd variant || isCpu variant then
      pkgs
    else if variant.cuda_set != null then
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
    # A missing attribute is a `throw` naming the path (catchable by tryEval, one clear line),
    # not Nix's uncatchable "attribute 'onednn' missing".
    foldl' (
      scope: name:
      if builtins.isAttrs scope && scope ? ${name} then
        scope.${name}
      else
        throw "capplan: plan.json asks for ${builtins.concatStringsSep "." variant.attr}, which this nixpkgs does not have (regenerate overlays/plan.json with `capplan generate` against this nixpkgs, or drop the package)"
    ) set variant.attr;

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
    A `<package>-hwcaps` output: the generic build in `lib/` and each level's build in
    `lib/glibc-hwcaps/<level>/` (symlinks, laid out by hwcaps_builder.py with the set's
    `python3`), so glibc 2.33+ loads the best build on every machine. Only shared libraries can
    be chosen this way; the builder fails with the reason for a package without any.
  */
  mkHwcaps =
    {
      name,
      pkgs,
      generic,
      levels,
    }:
    builtins.derivation {
      inherit name;
      inherit (pkgs.python3) system;
      builder = "${pkgs.python3}/bin/python3";
      args = [
        "-IS"
        hwcapsBuilder
      ];
      generic = "${generic}";
      levels = toJSON (mapAttrs (_: p: "${p}") levels);
    };

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
                config = variantConfig config variant;
                overlays = overlays ++ variantOverlays name variant;
              }
            );
          }
        ) names
      );
      packages = mapAttrs (
        name: variant:
        let
          pkgs = instances.${instanceKey selected.${name}};
        in
        if isHwcaps variant then
          mkHwcaps {
            inherit name pkgs;
            generic = selectPackage pkgs variant;
            levels = mapAttrs (
              level: member:
              if packages ? ${member} && isCpu selected.${member} then
                packages.${member}
              else
                throw "capplan: plan.json variant ${name}: cpu.hwcaps.${level} names ${toJSON member}, not a CPU-level variant of this system (regenerate overlays/plan.json with `capplan generate`)"
            ) variant.cpu.hwcaps;
          }
        else
          builtins.seq (checkInstance name variant pkgs) (selectPackage pkgs variant)
      ) valid;
      # Dispatch outputs (pkgs/dispatch.nix) of this system's variants: each Python variant's
      # environment is built with `python3.withPackages` in the variant's own package set; the
      # builder's interpreter is any instance's python3 (it does not depend on CUDA settings).
      # Dispatch is CUDA-only: a plan that lists an AMD variant there is refused by name.
      dispatchNames =
        if checked ? dispatch then
          map
            (
              name:
              if isAmd selected.${name} then
                throw "capplan: plan.json dispatch lists the AMD variant ${name}; dispatch wrappers are CUDA-only (regenerate overlays/plan.json with `capplan generate`)"
              else
                name
            )
            (
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
  inherit
    addCflags
    checkPlan
    checkVariant
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
