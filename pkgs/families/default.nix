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
#   dispatch      name: name, or a refusal when the family's variants have no dispatch wrapper
#   ownOutputs    variant: the output names when the family builds the variant with a builder of
#                 its own (builtins.derivation: [ "out" ]), or null when it is nixpkgs' package
#
# Like nixpkgs' own table of instances (pkgs/top-level/variants.nix at c1d241a1e859:
# `pkgsCuda`, `pkgsRocm` and `pkgsForCudaArch` are each `nixpkgsFun { config = super.config //
# { ... }; }`, a config delta over one import), a family is a config delta plus overlays over
# the same `import nixpkgs`; variant.nix holds no family's branch.  A new family is one file
# here and one line in `all`.
let
  cuda = import ./cuda.nix;
  rocm = import ./rocm.nix;
  cpu = import ./cpu.nix;
in
{
  inherit cuda rocm cpu;
  # In the order the unknown-vendor line lists them.
  all = [
    cuda
    rocm
    cpu
  ];
  # The family of a variant without a `vendor` key (plans written before AMD variants).
  unmarked = cuda;
}
