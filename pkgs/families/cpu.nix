# The CPU family: CPU-side variants (`"vendor": null`), packages no GPU family builds: one
# generic build, one build per CPU level (an overlay that changes that one package, never
# `gcc.arch`, which would rebuild the whole set) or a `<package>-hwcaps` output laying the
# per-level builds out for glibc-hwcaps.  Every family file returns the same set (see
# ./default.nix).  builtins only; from nixpkgs a package's `.override`/`.overrideAttrs`,
# `pythonPackagesExtensions` and `python3` (the hwcaps builder's interpreter).
let
  common = import ./lib.nix;
  inherit (builtins) attrNames mapAttrs;
  inherit (common) toJSON isStringList;
  hwcapsBuilder = ../hwcaps_builder.py;

  cpuOf = variant: variant.cpu or null;
  isHwcaps = variant: (cpuOf variant) ? hwcaps;

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
    A CPU-side variant takes no GPU targets; its `cpu` is null (a generic build), `{ hwcaps =
    { <level> = <variant name>; }; }` or `{ target; mechanism = "override" | "cflags";
    override; cflags; gccarch; }`.
  */
  check =
    name: variant:
    let
      rocm = variant.rocm or null;
      cpu = cpuOf variant;
      fail = common.fail name;
    in
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

  /**
    The overlay of a CPU-level variant, from plan data only: the package at the variant's
    `attr` rebuilt for its target, either through its own arguments (`mechanism = "override"`:
    `gromacs.override { cpuAcceleration = "AVX2_256"; }`) or with compiler flags for that one
    package (`mechanism = "cflags"`: `overrideAttrs` adding `-march=x86-64-v3` to
    NIX_CFLAGS_COMPILE). A top-level attribute is replaced in the set; a Python package
    (`python3Packages.NAME`) through `pythonPackagesExtensions`, so its dependents in the set
    use it too. Nothing else rebuilds. A generic build and a `-hwcaps` output have none.
  */
  overlays =
    name: variant:
    let
      cpu = cpuOf variant;
      rebuilt =
        package:
        if cpu.mechanism == "override" then
          package.override cpu.override
        else
          package.overrideAttrs (common.addCflags cpu.cflags);
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
      fail = common.fail name;
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
in
{
  # The family's name in plan.json's `machine.families` (the planner's: core/families/cpu).
  name = "cpu";
  vendor = null;

  # How a machine's CPU level is found (../machine.nix): a capplan.gpus entry naming one of the
  # CPU targets the exported table lists for the machine's system (the plan's levels, and the
  # x86-64 psABI levels). A facter report's PCI ids name no CPU.
  machine = {
    target =
      { lower, section, system, ... }:
      if ((section.targets or { }).${system} or { }) ? ${lower} then
        {
          target = lower;
          name = lower;
        }
      else
        null;
    pciVendor = null;
    fromPci = _section: _gpu: null;
  };
  # Its place among the families (./default.nix `all`): the registry's order.
  rank = 2;
  vendorText = "null (CPU-side)";

  inherit check overlays;

  # The set's own config; the CPU target comes from the overlay, which touches that one
  # package.
  config = baseConfig: variant: baseConfig;

  plainConfig = variant: {
    cpuTarget = (cpuOf variant).target or null;
    cpuMechanism = (cpuOf variant).mechanism or (if isHwcaps variant then "hwcaps" else null);
    cpuOverride = (cpuOf variant).override or { };
    cpuCflags = (cpuOf variant).cflags or [ ];
  };

  # Generic CPU-side builds and -hwcaps outputs share the plain set; each CPU-level variant
  # has its own (its overlay changes one package).
  instanceKey =
    variant:
    toJSON [
      variant.system
      "cpu"
      (if isHwcaps variant then null else (cpuOf variant))
      (if (cpuOf variant) == null || isHwcaps variant then null else variant.attr)
    ];

  packageSet = pkgs: variant: pkgs;

  # A -hwcaps output is laid out from the variants its cpu.hwcaps names, each a CPU-side
  # variant of the same system (`packages`: this system's variants, `selected`: their data).
  package =
    {
      name,
      variant,
      pkgs,
      packages,
      selected,
    }:
    if isHwcaps variant then
      mkHwcaps {
        inherit name pkgs;
        generic = common.select pkgs variant;
        levels = mapAttrs (
          level: member:
          if packages ? ${member} && (selected.${member} ? vendor && selected.${member}.vendor == null) then
            packages.${member}
          else
            throw "capplan: plan.json variant ${name}: cpu.hwcaps.${level} names ${toJSON member}, not a CPU-level variant of this system (regenerate overlays/plan.json with `capplan generate`)"
        ) variant.cpu.hwcaps;
      }
    else
      common.select pkgs variant;

  dispatch = name: name;

  # A -hwcaps output is our own builder's (builtins.derivation, one output); every other
  # CPU-side variant is nixpkgs' package.
  ownOutputs = variant: if isHwcaps variant then [ "out" ] else null;
}
