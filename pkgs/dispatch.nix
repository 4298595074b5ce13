# Dispatch outputs ("fat from thin"): one package that references every planned variant of a
# package and, at every start, runs the one that fits the GPU it finds.  Device code cannot be
# merged into linked libraries without relinking, so the choice is made at run time by a small
# standalone selector (planner/src/capplan/runtime/selector.py, Python's standard library only)
# reading a table that capplan generated (overlays/plan.json "dispatch") plus the variants' store
# paths.  The variants are referenced, not copied: a substituter fills them from the cache.
#
# builtins only; from nixpkgs only `python3` (its interpreter runs the builder and the wrappers)
# and `python3.withPackages` (each variant's Python environment, built in the variant's own
# package set), the same interface the stand-in in tests/nixpkgs honours.
let
  inherit (builtins)
    attrNames
    head
    listToAttrs
    map
    toJSON
    ;

  selector = ../planner/src/capplan/runtime/selector.py;

  # Writes the wrappers, the selector and its table (see the file's docstring).
  builder = ./dispatch_builder.py;

  isPython = variant: head variant.attr == "python3Packages";

  /**
    The selector's table for one package: the plan's dispatch data for it, each variant with the
    store path of what the wrappers start (its Python environment, or the variant itself).

    # Type

    ```
    mkTable :: { plan :: AttrSet, package :: String, envs :: AttrSet Derivation } -> AttrSet
    ```
  */
  mkTable =
    {
      plan,
      package,
      envs,
    }:
    let
      data = plan.dispatch;
    in
    {
      inherit (data) version pci jetson;
      inherit package;
      inherit (data.packages.${package}) fallback;
      # Only the variants given an environment: those of the package set's own system.
      variants = map (v: v // { path = "${envs.${v.name}}"; }) (
        builtins.filter (v: envs ? ${v.name}) data.packages.${package}.variants
      );
    };

  /**
    One dispatch derivation per planned package that has per-capability variants.

    # Type

    ```
    mkDispatch :: {
      plan :: AttrSet;                 # the decoded overlays/plan.json
      variants :: AttrSet Derivation;  # by variant name, e.g. pkgs.capplan.packages
      python :: Derivation;            # runs the builder and the wrappers (pkgs.python3)
      envs ? AttrSet Derivation;       # by variant name: what to start (default: below)
    } -> AttrSet Derivation            # by package: dispatch.torch
    ```

    By default a Python package's variant starts `python.withPackages (_: [ variant ])`, and any
    other package's variant is wrapped program by program from its own `bin/`.
  */
  mkDispatch =
    {
      plan,
      variants,
      python,
      envs ? null,
    }:
    let
      packages = if plan ? dispatch then attrNames plan.dispatch.packages else [ ];
      # The variants this call can start: those with an environment (`envs` given), else those
      # in `variants` (a multi-system plan's other systems are left out).
      membersOf =
        package:
        builtins.filter (name: if envs != null then envs ? ${name} else variants ? ${name}) (
          map (v: v.name) plan.dispatch.packages.${package}.variants
        );
      envFor =
        name:
        let
          variant = plan.variants.${name};
        in
        if envs != null then
          envs.${name}
        else if isPython variant then
          python.withPackages (_: [ variants.${name} ])
        else
          variants.${name};
      one =
        package:
        let
          members = membersOf package;
          table = mkTable {
            inherit plan package;
            envs = listToAttrs (
              map (name: {
                inherit name;
                value = envFor name;
              }) members
            );
          };
          python3Package = isPython plan.variants.${head members};
        in
        builtins.derivation {
          name = "${package}-dispatch";
          inherit (python) system;
          builder = "${python}/bin/python3";
          args = [
            "-IS"
            builder
          ];
          interpreter = "${python}/bin/python3";
          inherit selector;
          table = toJSON table;
          programs = toJSON (
            if python3Package then
              [
                "python"
                "python3"
              ]
            else
              [ ]
          );
        };
    in
    listToAttrs (
      map (package: {
        name = package;
        value = one package;
      }) (builtins.filter (p: membersOf p != [ ]) packages)
    );
in
{
  inherit mkTable mkDispatch isPython;
}
