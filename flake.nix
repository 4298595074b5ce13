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

      # The systems the plan has variants for (plans written before issue 12: plan.system).
      planSystems = plan.systems or [ plan.system ];

      # Per system, one lazy nixpkgs instance per distinct variant config; nothing is imported
      # until a variant is evaluated (evaluating one variant imports nixpkgs once).
      planned = genAttrs planSystems (
        system:
        variantLib.mkVariants {
          inherit nixpkgs plan system;
        }
      );

      capplanFor = system: import ./pkgs/capplan.nix { inherit (pkgsFor system) python3Packages; };

      # The variants live in legacyPackages, as nixpkgs keeps its package set there: `nix flake
      # show` and `nix flake check` do not descend into it, so they never import nixpkgs once per
      # variant config (each is a full instance: seconds and hundreds of MB on real nixpkgs).
      # `nix build .#torch-sm86` still works (Nix looks in legacyPackages after packages);
      # hydraJobs and checks.variants-evaluate are the places that force them all.
      # `<package>-dispatch` (pkgs/dispatch.nix): every variant of a package behind one wrapper
      # that starts the right one for the GPU it finds.
      dispatchFor =
        system:
        builtins.listToAttrs (
          map (package: {
            name = "${package}-dispatch";
            value = planned.${system}.dispatch.${package};
          }) (builtins.attrNames planned.${system}.dispatch)
        );

      variantsFor =
        system: if planned ? ${system} then planned.${system}.packages // dispatchFor system else { };

      # A derivation that depends on every variant's .drv file of one system but not on its
      # outputs: building it proves every variant evaluates, without building any of them.
      variantsEvaluate =
        system:
        builtins.derivation {
          name = "capplan-variants-evaluate";
          inherit system;
          builder = "/bin/sh";
          args = [
            "-c"
            ''printf '%s\n' "$variants" > "$out"''
          ];
          variants = builtins.toJSON (
            builtins.mapAttrs (
              _: drv: builtins.unsafeDiscardOutputDependency drv.drvPath
            ) planned.${system}.packages
          );
        };

      # `capplan generate --check` exits non-zero (with a diff) when overlays/plan.json is stale.
      planCurrent =
        system:
        builtins.derivation {
          name = "capplan-plan-current";
          inherit system;
          builder = "/bin/sh";
          args = [
            "-c"
            ''cd "$src" && "$capplan/bin/capplan" generate --check && printf 'plan.json is current\n' > "$out"''
          ];
          src = self.outPath;
          capplan = capplanFor system;
          NO_COLOR = "1";
          HOME = "/homeless-shelter";
        };
    in
    {
      overlays.default = import ./overlays;

      lib = {
        inherit (variantLib)
          mkOverlay
          mkVariants
          mkDispatch
          variantConfig
          checkPlan
          ;
        inherit plan;
      };

      legacyPackages = genAttrs systems variantsFor;

      packages = genAttrs systems (system: {
        capplan = capplanFor system;
        default = capplanFor system;
      });

      apps = genAttrs systems (system: {
        default = {
          type = "app";
          program = "${capplanFor system}/bin/capplan";
        };
      });

      # Hydra: hydraJobs.<variant>.<system>, each variant (and dispatch output) under the system
      # it is planned for; and the tool.
      hydraJobs =
        builtins.foldl' (
          jobs: system:
          jobs // builtins.mapAttrs (_: drv: { ${system} = drv; }) (variantsFor system)
        ) { } planSystems
        // {
          capplan = genAttrs systems capplanFor;
        };

      checks = genAttrs systems (
        system:
        {
          capplan = capplanFor system;
          plan-current = planCurrent system;
        }
        // (if planned ? ${system} then { variants-evaluate = variantsEvaluate system; } else { })
      );

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
