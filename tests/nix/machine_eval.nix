# Evaluates a fleet's NixOS or home-manager module the way NixOS and home-manager do, for
# tests/nix/test_machine*.py: nixpkgs' real module system (`lib.evalModules`, from
# ../shared/nixpkgs-lib, unmodified) over the module, stubs of only the options it reads or
# writes, and the test's own configuration; then the failed assertions stop it with NixOS's
# "Failed assertions:" text, and the stand-in nixpkgs is imported with the overlays and config
# the evaluation produced (nixos/modules/misc/nixpkgs.nix does the same with real nixpkgs).
# `fleet` is the fleet flake's outputs (pkgs/fleet.nix mkFleetFlake over the stand-in).
{
  root,
  standin,
  nixpkgsLib,
  kind ? "nixos",
  facter ? false,
  config ? { },
  # A docs block: fleet -> module, which imports the fleet's module itself.
  withFleet ? null,
  system ? "x86_64-linux",
}:
let
  lib = import nixpkgsLib;
  nixpkgs = {
    outPath = standin;
    legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (s: import standin { system = s; });
  };
  fleet = (import (root + "/pkgs/fleet.nix")).mkFleetFlake {
    inherit nixpkgs;
    plan = root + "/overlays/plan.json";
  };
  raw = lib.types.unspecified;
  stubs =
    { lib, ... }:
    {
      options = {
        nixpkgs.overlays = lib.mkOption {
          type = lib.types.listOf raw;
          default = [ ];
        };
        nixpkgs.config = lib.mkOption {
          type = lib.types.attrsOf raw;
          default = { };
        };
        nix.settings = lib.mkOption {
          type = lib.types.attrsOf (lib.types.listOf lib.types.str);
          default = { };
        };
        assertions = lib.mkOption {
          type = lib.types.listOf raw;
          default = [ ];
        };
        warnings = lib.mkOption {
          type = lib.types.listOf lib.types.str;
          default = [ ];
        };
      };
    };
  platformStubs =
    { lib, ... }:
    {
      options =
        if kind == "nixos" then
          {
            nixpkgs.hostPlatform = lib.mkOption { type = lib.types.str; };
          }
        else
          {
            # home-manager: `home.*` marks it; nix.conf needs a Nix package there.
            home.stateVersion = lib.mkOption {
              type = lib.types.str;
              default = "25.11";
            };
            nix.package = lib.mkOption {
              type = lib.types.nullOr raw;
              default = null;
            };
          };
    };
  # As nixpkgs' hardware.facter module (and nixos-facter-modules' facter.nix at
  # 0ea1797c169649d5380bc9ae5ef28f5953de6f3a: `report = mkOption { type = types.raw; default
  # = builtins.fromJSON (builtins.readFile config.facter.reportPath); }`) declares them.
  facterStubs =
    { lib, config, ... }:
    {
      options = lib.optionalAttrs facter {
        hardware.facter.reportPath = lib.mkOption {
          type = lib.types.nullOr lib.types.path;
          default = null;
        };
        hardware.facter.report = lib.mkOption {
          type = raw;
          default =
            if config.hardware.facter.reportPath == null then
              { }
            else
              builtins.fromJSON (builtins.readFile config.hardware.facter.reportPath);
        };
      };
    };
  module = if kind == "nixos" then fleet.nixosModules.default else fleet.homeModules.default;
  evaluated = lib.evalModules {
    modules = [
      stubs
      platformStubs
      facterStubs
    ]
    ++ (if withFleet == null then [ module config ] else [ (withFleet fleet) ])
    ++ lib.optional (kind == "nixos") { nixpkgs.hostPlatform = lib.mkDefault system; };
  };
  cfg = evaluated.config;
  failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  pkgs =
    if failed != [ ] then
      throw "\nFailed assertions:\n${lib.concatMapStrings (x: "- ${x}\n") failed}"
    else
      import standin {
        inherit system;
        overlays = cfg.nixpkgs.overlays;
        config = cfg.nixpkgs.config;
      };
in
{
  inherit pkgs fleet cfg;
  default = nixpkgs.legacyPackages.${system};
  variants = fleet.legacyPackages.${system};
  inherit (cfg) warnings;
  settings = cfg.nix.settings;
}
