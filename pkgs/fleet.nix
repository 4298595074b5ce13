# A fleet flake's outputs from its plan.json: what capplan's own flake gives, for a user's own
# repository that takes capplan as an input (`nix flake init -t <capplan>` writes one; so does
# `capplan init`).  builtins only, and from nixpkgs only what variant.nix and capplan.nix use.
let
  variantLib = import ./variant.nix;
  machineLib = import ./machine.nix;

  genAttrs =
    names: f:
    builtins.listToAttrs (
      map (name: {
        inherit name;
        value = f name;
      }) names
    );

  # A plan with no variants: a fleet repository before its first `capplan generate` still
  # evaluates (and `nix run .#capplan -- generate` works there).
  emptyPlan = system: {
    version = 1;
    inherit system;
    systems = [ ];
    variants = { };
  };

  /**
    The outputs of a fleet flake: `legacyPackages.<system>.<variant>` (and `<package>-dispatch`),
    `overlays.default`, `nixosModules.default`, `homeModules.default` (and
    `homeManagerModules.default`, the same module), `lib.overlayFor`, `hydraJobs`, `checks`, and the capplan tool as `packages.<system>.capplan`
    and `apps.<system>.capplan`, so every `nix run .#capplan` of a workflow `capplan ci github`
    wrote resolves in the fleet's own flake.

    # Type

    ```
    mkFleetFlake :: AttrSet -> AttrSet
    ```

    # Example

    ```nix
    outputs = { self, nixpkgs, capplan }:
      capplan.lib.mkFleetFlake { inherit nixpkgs self; plan = ./overlays/plan.json; };
    ```

    # Inputs

    `nixpkgs`
    : the nixpkgs flake the variants (and the tool) are built from

    `plan`
    : the plan `capplan generate` wrote: a path (a missing file is an empty plan) or the
      decoded attrset

    `self`
    : optional; the fleet flake itself: with it, `checks.<system>.plan-current` runs
      `capplan generate --check` in its source, so a stale plan.json fails `nix flake check`

    `systems`
    : the systems the tool is built for (the variants follow the plan's own systems)
  */
  mkFleetFlake =
    {
      nixpkgs,
      plan,
      self ? null,
      systems ? [
        "x86_64-linux"
        "aarch64-linux"
      ],
    }:
    let
      isPath = builtins.isPath plan || builtins.isString plan;
      decoded =
        if !isPath then
          plan
        else if builtins.pathExists plan then
          builtins.fromJSON (builtins.readFile plan)
        else
          emptyPlan (builtins.head systems);
      checked = variantLib.checkPlan decoded;
      pkgsFor = system: nixpkgs.legacyPackages.${system};

      # The systems the plan has variants for (plans written before issue 12: plan.system).
      planSystems = checked.systems or [ checked.system ];

      # Per system, one lazy nixpkgs instance per distinct variant config; nothing is imported
      # until a variant is evaluated (evaluating one variant imports nixpkgs once).
      planned = genAttrs planSystems (
        system:
        variantLib.mkVariants {
          inherit nixpkgs system;
          plan = checked;
        }
      );

      capplanFor = system: import ./capplan.nix { inherit (pkgsFor system) python3Packages; };

      # The variants live in legacyPackages, as nixpkgs keeps its package set there: `nix flake
      # show` and `nix flake check` do not descend into it, so they never import nixpkgs once per
      # variant config (each is a full instance: seconds and hundreds of MB on real nixpkgs).
      # `nix build .#torch-sm86` still works (Nix looks in legacyPackages after packages);
      # hydraJobs and checks.variants-evaluate are the places that force them all.
      # `<package>-dispatch` (dispatch.nix): every variant of a package behind one wrapper that
      # starts the right one for the GPU it finds.
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

      # A variant's job for hydraJobs. `nix flake show` reads `type` and `name` of every leaf
      # of hydraJobs (and `meta.description` with --json); on the variant itself that means
      # importing nixpkgs once per variant config (15 imports for the committed plan, seconds
      # and hundreds of MB each on real nixpkgs). This record answers those from the plan, and
      # its attribute names (the output names) from the system's default set, which the flake
      # imports anyway; every other value (drvPath, outPath, system, each output, meta's keys
      # that Hydra reads) is the variant's own, evaluated only when read, as nix-eval-jobs
      # does (PackageInfo: name, outputs and each output's outPath, drvPath, meta). An output
      # list that differs from the default set's fails the evaluation with the variant's name.
      # `name` is the variant's name (torch-sm86), not the package's (python3.13-torch-2.9.1).
      hydraMetaKeys = [
        "license"
        "homepage"
        "maintainers"
        "schedulingPriority"
        "timeout"
        "maxSilent"
        "platforms"
        "broken"
      ];
      outputNamesOf =
        system: name:
        let
          variant = checked.variants.${name} or null;
          # Our own builders are builtins.derivation with the default outputs: dispatch
          # wrappers (no plan variant) and what a family builds itself (-hwcaps outputs).
          own = if variant == null then [ "out" ] else variantLib.ownOutputs variant;
          found = builtins.foldl' (
            set: key: if set != null && builtins.isAttrs set && set ? ${key} then set.${key} else null
          ) (pkgsFor system) variant.attr;
        in
        if own != null then
          own
        else if found != null && found ? outputs then
          found.outputs
        else
          null;
      lazyJob =
        system: name: drv:
        let
          names = outputNamesOf system name;
          outputs = if names == null then drv.outputs or [ "out" ] else names;
          checked =
            if (drv.outputs or [ "out" ]) == outputs then
              drv
            else
              throw "capplan: hydraJobs.${name}.${system}: the variant's outputs ${builtins.toJSON (drv.outputs or [ "out" ])} are not the default set's ${builtins.toJSON outputs} (report this to capplan)";
          meta = checked.meta or { };
        in
        {
          type = "derivation";
          inherit name outputs;
          system = checked.system;
          drvPath = checked.drvPath;
          outPath = checked.outPath;
          outputName = "out";
          meta = {
            description = "capplan variant ${name} (${system})";
          }
          // genAttrs hydraMetaKeys (key: meta.${key} or null);
        }
        // genAttrs outputs (output: checked.${output});

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

      # `capplan generate --check` in the flake's source exits non-zero (with a diff) when the
      # plan file is stale; it compares against the plan this flake reads, wherever it lies.
      planCurrent =
        system:
        builtins.derivation {
          name = "capplan-plan-current";
          inherit system;
          builder = "/bin/sh";
          args = [
            "-c"
            ''cd "$src" && "$capplan/bin/capplan" generate --check --output "$plan" && printf 'plan.json is current\n' > "$out"''
          ];
          src = self.outPath;
          inherit plan;
          capplan = capplanFor system;
          NO_COLOR = "1";
          HOME = "/homeless-shelter";
        };
      withPlanCurrent = self != null && isPath && builtins.pathExists plan;

      # The machine side (machine.nix): a machine's variants are this flake's own, so the
      # path it gets is the path the build matrix fills.
      machineVariants = system: if planned ? ${system} then planned.${system}.packages else { };
      machineModule = import ./module.nix {
        plan = checked;
        variantsFor = machineVariants;
      };
      overlayFor =
        {
          gpus ? [ ],
          facterReport ? null,
          onUnserved ? "error",
        }:
        machineLib.overlay {
          plan = checked;
          variantsFor = machineVariants;
          inherit gpus facterReport onUnserved;
        };
    in
    {
      overlays.default = variantLib.mkOverlay checked;

      # `capplan.enable = true; capplan.gpus = [ "RTX 3090" ];` on a NixOS machine or in a
      # home-manager configuration; `lib.overlayFor { gpus = [ "8.6" ]; }` for a plain
      # `import nixpkgs { overlays = [ ... ]; }` or a devShell.
      nixosModules.default = machineModule;
      homeModules.default = machineModule;
      homeManagerModules.default = machineModule;
      lib = {
        inherit overlayFor;
      };

      legacyPackages = genAttrs systems variantsFor;

      packages = genAttrs systems (system: {
        capplan = capplanFor system;
        default = capplanFor system;
      });

      apps = genAttrs systems (
        system:
        let
          app = {
            type = "app";
            program = "${capplanFor system}/bin/capplan";
          };
        in
        {
          capplan = app;
          default = app;
        }
      );

      # Hydra: hydraJobs.<variant>.<system>, each variant (and dispatch output) under the system
      # it is planned for, as a job record (lazyJob); and the tool. (Before issue 34 a
      # dispatch output of the last system replaced the others'.)
      hydraJobs =
        builtins.foldl' (
          jobs: system:
          # Merged per name: dispatch outputs have the same name on every system.
          jobs
          // builtins.mapAttrs (
            name: drv: (jobs.${name} or { }) // { ${system} = lazyJob system name drv; }
          ) (variantsFor system)
        ) { } planSystems
        // {
          capplan = genAttrs systems capplanFor;
        };

      checks = genAttrs systems (
        system:
        {
          capplan = capplanFor system;
        }
        // (if withPlanCurrent then { plan-current = planCurrent system; } else { })
        // (if planned ? ${system} then { variants-evaluate = variantsEvaluate system; } else { })
      );
    };
in
{
  inherit mkFleetFlake;
}
