# Stand-in nixpkgs as a flake, shaped like the real one: `legacyPackages.<system>` is the
# package set with the default config, and `import <this flake> { ... }` works through
# default.nix.  Used with `--override-input nixpkgs path:<repo>/tests/nixpkgs`.
{
  description = "capplan test stand-in for nixpkgs (contract: NIXPKGS.md)";

  outputs =
    { self }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      genAttrs = names: f: builtins.listToAttrs (map (name: { inherit name; value = f name; }) names);
    in
    {
      legacyPackages = genAttrs systems (system: import ./default.nix { inherit system; });
      # Real nixpkgs exposes its whole lib here; the stand-in only has its private helpers,
      # which capplan's Nix code must not use.
      lib = import ./lib.nix;
    };
}
