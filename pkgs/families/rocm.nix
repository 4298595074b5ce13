# The ROCm family: AMD variants, each built in a nixpkgs instance that is real `pkgsRocm`
# (pkgs/top-level/variants.nix) plus overlays made from plan data: a per-target ROCm scope,
# packages' `.override { gpuTargets; }`, libraries changed inside the scope.  Every family file
# returns the same set (see ./default.nix); this one names `"amd"`.  From nixpkgs only what
# NIXPKGS.md lists: the config key `rocmSupport`, the per-target scopes
# `rocmPackages.<scope>` and a package's `.override { gpuTargets; }`, checked against the
# arguments `.override` carries.
let
  common = import ./lib.nix;
  inherit (builtins) attrNames foldl';
  inherit (common) toJSON isStringList;

  # core/families/rocm/kb.py normalise_amd_name: letters and digits, the leading vendor and
  # line words dropped ("AMD Instinct MI300X" -> "mi300x").
  normaliseAmd =
    text:
    let
      drop =
        ws:
        if ws != [ ] && builtins.elem (builtins.head ws) [ "amd" "radeon" "instinct" ] then
          drop (builtins.tail ws)
        else
          ws;
    in
    builtins.concatStringsSep "" (drop (common.splitWords "[^a-z0-9]+" (common.toLower text)));

  /**
    A loose AMD name, as the CLI's lookup_gpu answers it (the NVIDIA family is asked first, as
    claim.amd_entry does): an exact normalised name or alias, else every model whose name holds
    the name given; models of several targets make it ambiguous.
  */
  loose =
    {
      text,
      shown,
      section,
      ...
    }:
    let
      key = normaliseAmd text;
      models = section.models or [ ];
      exact = builtins.filter (m: builtins.elem key m.keys) models;
      partial = builtins.filter (m: builtins.match ".*${key}.*" m.name_key != null) models;
      picked = if exact != [ ] then [ (builtins.head exact) ] else partial;
      targets = foldl' (acc: m: if builtins.elem m.target acc then acc else acc ++ [ m.target ]) [ ] picked;
      listed = builtins.genList (builtins.elemAt picked) (
        if builtins.length picked < 4 then builtins.length picked else 4
      );
    in
    if key == "" || picked == [ ] then
      null
    else if builtins.length targets > 1 then
      {
        error = "GPU name '${shown}' is ambiguous: ${
          builtins.concatStringsSep ", " (map (m: "${m.name} (${m.shown})") listed)
        } (give the full model name or its gfx target)";
      }
    else
      {
        inherit (builtins.head picked) target name;
      };

  # lib.functionArgs (lib/trivial.nix), written with builtins: a package's `.override` is a
  # functor made by lib.mirrorFunctionArgs that carries the recipe's arguments, which plain
  # builtins.functionArgs refuses ("value is a set while a lambda was expected").
  functionArgs =
    f:
    if f ? __functor then f.__functionArgs or (functionArgs (f.__functor f)) else builtins.functionArgs f;

  /**
    An AMD variant carries `rocm = { scope = "package" | "stack"; scope_attr; targets;
    overrides; arguments ? {}; scope_overrides ? {}; }` and no CPU key.
  */
  check =
    name: variant:
    let
      rocm = variant.rocm or null;
      fail = common.fail name;
    in
    if (variant.cpu or null) != null then
      fail "an AMD variant has cpu ${toJSON (variant.cpu or null)}, expected null"
    else if !(builtins.isAttrs rocm) then
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
  overlays =
    name: variant:
    let
      inherit (variant) rocm;
      fail = common.failAgainst name;
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
          common.gpuTargetsOverlay gpuTargets
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
    The instance has every package the variant's rocm.overrides name (the overlay only
    overrides what exists, so a name nixpkgs lacks would otherwise be ignored in silence).
  */
  checkInstance =
    name: variant: pkgs:
    foldl' (
      ok: package:
      if package == "torch" || pkgs ? ${package} then
        ok
      else
        common.failAgainst name "rocm.overrides names ${toJSON package}, which this nixpkgs does not have"
    ) true (attrNames variant.rocm.overrides);
in
{
  # The family's name in plan.json's `machine.families` (the planner's: core/families/rocm).
  name = "rocm";
  vendor = "amd";

  # How a machine's AMD GPUs are found (../machine.nix): a capplan.gpus entry the exported
  # names table gives an AMD answer (a gfx processor, a model's name or alias). The knowledge
  # base has no AMD PCI ids yet, so a facter report's AMD GPU asks for its gfx target.
  machine = {
    target =
      { names, key, ... }:
      let
        found = names.${key} or null;
      in
      if found != null && (found.vendor or null) == "amd" then
        { inherit (found) target name; }
      else
        null;
    inherit loose;
    pciVendor = "1002";
    fromPci =
      section: gpu:
      let
        target = ((section.pci or { }).devices or { }).${gpu.device} or null;
      in
      if target == null then
        {
          error = "capplan: the facter report's AMD GPU 1002:${gpu.device} (${gpu.model}) is not in capplan's PCI table (it has no AMD ids yet): name its gfx target in capplan.gpus, e.g. \"gfx1100\" (`rocminfo` or `capplan detect` prints it)";
        }
      else
        {
          inherit target;
          name = gpu.model;
        };
  };
  # Its place among the families (./default.nix `all`): the registry's order.
  rank = 1;
  vendorText = ''"amd"'';

  inherit check overlays;

  # Real `pkgsRocm` (variants.nix: `config = super.config // { cudaSupport = false; rocmSupport
  # = true; }`); ROCm is free software, so allowUnfree is left alone. nixpkgs has no config key
  # for GPU targets: they come from the overlays.
  config =
    baseConfig: variant:
    baseConfig
    // {
      cudaSupport = false;
      rocmSupport = true;
    };

  plainConfig = variant: {
    cudaSupport = false;
    rocmSupport = true;
    rocmScope = variant.rocm.scope;
    rocmScopeAttr = variant.rocm.scope_attr;
    gpuTargets = variant.rocm.targets;
  };

  # One instance per (system, scope_attr, overrides, arguments, scope_overrides): the ROCm
  # config is the same for all of them.
  instanceKey =
    variant:
    toJSON [
      variant.system
      "amd"
      (variant.rocm.scope_attr or null)
      (variant.rocm.overrides or null)
      (variant.rocm.arguments or { })
      (variant.rocm.scope_overrides or { })
    ];

  # No CUDA to check: the instance itself.
  packageSet = pkgs: variant: pkgs;

  package =
    {
      name,
      variant,
      pkgs,
      ...
    }:
    builtins.seq (checkInstance name variant pkgs) (common.select pkgs variant);

  # Dispatch is CUDA-only: a plan that lists an AMD variant there is refused by name.
  dispatch =
    name:
    throw "capplan: plan.json dispatch lists the AMD variant ${name}; dispatch wrappers are CUDA-only (regenerate overlays/plan.json with `capplan generate`)";

  # Every ROCm variant is nixpkgs' own package, in a ROCm instance.
  ownOutputs = _variant: null;
}
