# The NixOS module and the home-manager module of a fleet flake (one module serves both:
# `nixosModules.default`, `homeModules.default`, `homeManagerModules.default`): with
# `capplan.enable`, the machine's package set gets the fleet's variants for its GPUs
# (./machine.nix: only planned packages change, each to the very store path the fleet's cache
# holds) and nix.conf trusts the fleet's cache (plan.json `cache`, from capplan.toml's
# [cache]). Wrong values are assertions, one `capplan:` line each, as NixOS reports them; the
# overlay throws the same line where it is evaluated first.
{ plan, variantsFor }:
{
  config,
  lib,
  options,
  ...
}:
let
  machine = import ./machine.nix;
  cfg = config.capplan;
  # nixos-facter's report where the machine has it (nixpkgs' hardware.facter module, or
  # nixos-facter-modules'); home-manager has none.
  hasFacter = options ? hardware && options.hardware ? facter && options.hardware.facter ? report;
  isHomeManager = options ? home;
  hasNixSettings = options ? nix && options.nix ? settings;

  # The machine's system where the configuration says it without evaluating nixpkgs
  # (NixOS nixpkgs.hostPlatform, a facter report's `system`); else the checks that need it
  # wait for the overlay.
  platformSystem =
    if options ? nixpkgs && options.nixpkgs ? hostPlatform && options.nixpkgs.hostPlatform.isDefined then
      (
        let
          p = config.nixpkgs.hostPlatform;
        in
        if builtins.isString p then p else p.system
      )
    else
      null;
  reportSystem = (machine.readReport cfg.facterReport).system;
  system =
    if platformSystem != null then
      platformSystem
    else if reportSystem != null then
      reportSystem
    else
      "";

  answer = machine.resolve {
    inherit plan system;
    inherit (cfg) gpus facterReport onUnserved;
  };
  cache = machine.cacheSettings plan;
  hasCache = cache.substituters != [ ] || cache.publicKeys != [ ];
  # home-manager writes nix.conf only with a Nix package to write it for.
  canWriteNixConf = hasNixSettings && (!isHomeManager || (config.nix.package or null) != null);

  # capplan.gpus takes any value so that a wrong one is reported by capplan with its own line
  # (a list of strings is checked by ./machine.nix); several definitions concatenate.
  gpusType = lib.mkOptionType {
    name = "capplanGpus";
    description = "list of GPU names, capabilities, gfx targets or CPU levels";
    check = _: true;
    merge = lib.options.mergeDefaultOption;
  };
  reportType = lib.mkOptionType {
    name = "capplanFacterReport";
    description = "null, a path to a nixos-facter report.json, or the decoded report";
    check = _: true;
    merge = lib.options.mergeEqualOption;
  };
in
{
  options.capplan = {
    enable = lib.mkEnableOption "the fleet's cached GPU builds (capplan) for this machine's GPUs";

    gpus = lib.mkOption {
      type = gpusType;
      default = [ ];
      example = [
        "RTX 3090"
        "8.6"
        "gfx1100"
        "x86-64-v3"
      ];
      description = ''
        This machine's GPUs: names as `capplan gpus` prints them (or an alias, in any case and
        spacing), capabilities ("8.6", "sm_86"), AMD gfx targets ("gfx1100"), and optionally
        its CPU level ("x86-64-v3") for packages planned per CPU level. Several GPUs get the
        variant that serves all of them (a planned fat build or group).
      '';
    };

    facterReport = lib.mkOption {
      type = reportType;
      default = if hasFacter then config.hardware.facter.report else null;
      defaultText = lib.literalExpression "config.hardware.facter.report (where that option exists), else null";
      description = ''
        A nixos-facter hardware report (its path, or the decoded report as
        `hardware.facter.report` holds it): its GPUs are found by PCI vendor and device id
        through capplan's PCI table, added to `capplan.gpus`.
      '';
    };

    onUnserved = lib.mkOption {
      type = lib.types.enum [
        "error"
        "default"
      ];
      default = "error";
      description = ''
        What a planned package gets when no variant of the plan serves this machine's GPUs:
        "error" stops the evaluation with the reason; "default" keeps nixpkgs' own package
        (not in the fleet's cache) and warns.
      '';
    };
  };

  config = lib.mkIf cfg.enable (
    {
      nixpkgs.overlays = [
        (machine.overlay {
          inherit plan variantsFor;
          inherit (cfg) gpus facterReport onUnserved;
        })
      ];
      assertions = map (message: {
        assertion = false;
        inherit message;
      }) answer.errors;
      warnings =
        answer.warnings
        ++ lib.optional (hasCache && !canWriteNixConf) "capplan: the fleet's cache is not added to nix.conf: ${
          if hasNixSettings then "set nix.package so home-manager writes nix.conf" else "this configuration has no nix.settings"
        } (substituters: ${toString cache.substituters})";
    }
    // lib.optionalAttrs hasNixSettings {
      nix.settings = lib.mkIf (hasCache && canWriteNixConf) {
        extra-substituters = cache.substituters;
        extra-trusted-public-keys = cache.publicKeys;
      };
    }
  );
}
