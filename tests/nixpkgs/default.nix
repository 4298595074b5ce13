# Stand-in for nixpkgs' top-level default.nix (see README.md here): the entry point of
# `import nixpkgs { system; config; overlays; }`.
#
# Every import prints one line on stderr, so tests can count how many package sets an
# evaluation instantiated:
#   trace: capplan-standin: import system=... config={...}
# (re-instantiations from inside a set -- pkgsForCudaArch, pkgsCuda, extend, cudaPackages_X_Y.pkgs --
# print `capplan-standin: instantiate via=...` instead; see stage.nix).
{
  # Real nixpkgs also takes `localSystem`; `system` is its older spelling, still accepted.
  localSystem ? {
    system = args.system or builtins.currentSystem;
  },
  system ? localSystem.system,
  crossSystem ? localSystem,
  config ? { },
  overlays ? [ ],
  ...
}@args:
# pkgs/top-level/impure.nix: `system` and `localSystem` are two spellings of one argument.
assert args ? localSystem -> !(args ? system);
assert args ? system -> !(args ? localSystem);
let
  stage = import ./stage.nix;
  # config may be a function of the package set in real nixpkgs; the stand-in accepts attrsets
  # only and says so instead of guessing.
  configAttrs =
    if builtins.isAttrs config then
      config
    else
      throw "capplan-standin: config must be an attribute set (the stand-in does not take config functions)";
  # lib.systems.elaborate, reduced: a platform is an attrset with `system` (an elaborated
  # platform from another set's stdenv passes through).
  platform = p: { inherit (p) system; isLinux = builtins.match ".*-linux" p.system != null; };
in
stage {
  localSystem = platform localSystem;
  crossSystem = platform crossSystem;
  inherit overlays;
  config = configAttrs;
  via = "import";
}
