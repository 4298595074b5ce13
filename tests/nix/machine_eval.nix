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
  config,
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
  facterStubs =
    { lib, ... }:
    {
      options = lib.optionalAttrs facter {
        hardware.facter.report = lib.mkOption {
          type = raw;
          default = { };
        };
      };
    };
  module = if kind == "nixos" then fleet.nixosModules.default else fleet.homeModules.default;
  evaluated = lib.evalModules {
    modules = [
      stubs
      platformStubs
      facterStubs
      module
      config
    ]
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
