{
  description = "capplan: per-capability CUDA variants and fat builds for nixpkgs, from a plan";

  # Pinned in flake.lock (nixos-unstable, NIXPKGS.md section 9).  Tests replace it with the
  # stand-in: --override-input nixpkgs path:./tests/nixpkgs
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  # Only builtins and the items NIXPKGS.md lists are used from nixpkgs, plus the Python
  # packaging items pkgs/capplan.nix, the devShell and the formatter need.
  outputs =
    { self, nixpkgs }:
    let
      variantLib = import ./pkgs/variant.nix;
      fleetLib = import ./pkgs/fleet.nix;
      plan = variantLib.checkPlan (builtins.fromJSON (builtins.readFile ./overlays/plan.json));

      # The variants are planned per system (plan.json "systems"; each variant names its own
      # "system"); the tool is built for every system below.
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      genAttrs =
        names: f:
        builtins.listToAttrs (
          map (name: {
            inherit name;
            value = f name;
          }) names
        );
      pkgsFor = system: nixpkgs.legacyPackages.${system};
      capplanFor = system: import ./pkgs/capplan.nix { inherit (pkgsFor system) python3Packages; };

      # The same outputs a fleet repository gets from `capplan.lib.mkFleetFlake` (pkgs/fleet.nix):
      # legacyPackages (variants), overlays.default, packages/apps capplan, hydraJobs, checks.
      fleet = fleetLib.mkFleetFlake {
        inherit nixpkgs self systems;
        plan = ./overlays/plan.json;
      };

      # `nix flake init -t <capplan>`: a fleet repository of its own (flake.nix calling
      # lib.mkFleetFlake, a starter capplan.toml, a README); `capplan init` writes the same files.
      template = {
        path = ./planner/src/capplan/templates/fleet;
        description = "A GPU fleet of your own: capplan.toml, the plan, and a flake that builds it";
      };
    in
    fleet
    // {
      lib = {
        inherit (variantLib)
          mkOverlay
          mkVariants
          mkDispatch
          variantConfig
          checkPlan
          ;
        inherit (fleetLib) mkFleetFlake;
        inherit (fleet.lib) overlayFor;
        inherit plan;
      };

      templates = {
        default = template;
        fleet = template;
      };

      devShells = genAttrs systems (
        system:
        let
          pkgs = pkgsFor system;
        in
        {
          default = pkgs.mkShell {
            packages = [
              (pkgs.python3.withPackages (
                ps:
                (capplanFor system).pythonDependencies ps
                ++ (with ps; [
                  setuptools
                  pytest
                  hypothesis
                  mypy
                  types-requests
                ])
              ))
              pkgs.ruff
              pkgs.nixfmt
            ];
          };
        }
      );

      formatter = genAttrs systems (system: (pkgsFor system).nixfmt);
    };
}
