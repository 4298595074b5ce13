# The target families, as a table: the one place that names them.  Each family file returns the
# same set, what the variant builder (../variant.nix) asks of a variant's family:
#
#   vendor        the plan.json `vendor` value of its variants ("nvidia", "amd", null)
#   vendorText    how the line refusing an unknown vendor lists that value
#   check         name: variant: variant, or one `capplan:` line for data it does not read
#   config        baseConfig: variant: the nixpkgs config of the variant's instance
#   plainConfig   variant: what `pkgs.capplan.configs` shows (plain data)
#   overlays      name: variant: the overlays the instance adds to the set's own
#   instanceKey   variant: a string; variants with one key share one nixpkgs instance
#   packageSet    pkgs: variant: the package set of the instance the variant is taken from
#   package       { name, variant, pkgs, packages, selected }: the variant's derivation
#   name          the family's name in plan.json's `machine` section ("cuda", "rocm", "cpu")
#   machine       how a machine's targets are found (../machine.nix): `target` (an exact
#                 capplan.gpus entry), `loose` (a loose name; optional), `pciVendor` and
#                 `fromPci` (a nixos-facter PCI id), `keyDrops` (words exact keys leave out);
#                 optional: a family without it gives machines nothing
#   dispatch      name: name, or a refusal when the family's variants have no dispatch wrapper
#   ownOutputs    variant: the output names when the family builds the variant with a builder of
#                 its own (builtins.derivation: [ "out" ]), or null when it is nixpkgs' package
#
# Like nixpkgs' own table of instances (pkgs/top-level/variants.nix at c1d241a1e859:
# `pkgsCuda`, `pkgsRocm` and `pkgsForCudaArch` are each `nixpkgsFun { config = super.config //
# { ... }; }`, a config delta over one import), a family is a config delta plus overlays over
# the same `import nixpkgs`; variant.nix holds no family's branch.  A new family is one file
# here: every `.nix` file in this folder but this one and lib.nix (what the families share) is a
# family, found with builtins.readDir (issue 42: a fourth family adds no line to any table).
# Each sets `rank`, its place in `all`: the Python registry's order (core/families/registry.py
# `_FAMILIES`), which the unknown-vendor line follows.
let
  inherit (builtins)
    attrNames
    elem
    filter
    head
    listToAttrs
    match
    readDir
    sort
    stringLength
    substring
    ;
  notFamilies = [
    "default.nix"
    "lib.nix"
  ];
  files = readDir ./.;
  isFamily =
    file: files.${file} == "regular" && match ".*\\.nix" file != null && !(elem file notFamilies);
  byName = listToAttrs (
    map (file: {
      name = substring 0 (stringLength file - 4) file;
      value = import (./. + "/${file}");
    }) (filter isFamily (attrNames files))
  );
  # By rank, then by name (two files of one rank still list in one order).
  ordered = sort (
    a: b: if a.value.rank != b.value.rank then a.value.rank < b.value.rank else a.name < b.name
  ) (map (name: { inherit name; value = byName.${name}; }) (attrNames byName));
  all = map (f: f.value) ordered;
in
byName
// {
  # In the order the unknown-vendor line lists them.
  inherit all;
  # The family of a variant without a `vendor` key (plans written before AMD variants): the
  # first, CUDA's.
  unmarked = head all;
}
