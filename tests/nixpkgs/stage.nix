# callPackageWith follows NixOS/nixpkgs lib/customisation.nix as lib.nix line 1 cites (lib.functionArgs on the recipe, makeOverridable with mirrored arguments).
# Stand-in for pkgs/top-level/stage.nix + all-packages.nix + variants.nix: one package set.
# Only what ../../NIXPKGS.md (the contract) lists, with real nixpkgs' behaviour; the package
# definitions live in the small files next to this one.
{
  # Platforms as default.nix reduces them: build platform and host platform.
  localSystem,
  crossSystem,
  config,
  overlays,
  via,
}:
let
  # Packages are built for the host platform (crossSystem; = localSystem when native).
  inherit (crossSystem) system;
  lib = import ./lib.nix;
  db = builtins.fromJSON (builtins.readFile ./cuda-capabilities.json);

  # pkgs/top-level/config.nix defaults for the keys the contract names.
  defaults = {
    allowUnfree = false;
    cudaSupport = false;
    rocmSupport = false;
    # [] means "the default list of the CUDA package set in use" (_cuda flags / backendStdenv).
    cudaCapabilities = [ ];
    cudaForwardCompat = true;
  };
  resolvedConfig = defaults // config;

  # nixpkgsFun in pkgs/top-level/stage.nix: a new instantiation with the same overlays.
  nixpkgsFun =
    newArgs:
    import ./stage.nix (
      {
        inherit
          localSystem
          crossSystem
          config
          overlays
          ;
      }
      // newArgs
    );

  callPackageWith =
    scope: fn: args:
    let
      f = if lib.isFunction fn then fn else import fn;
      # lib/customisation.nix callPackageWith: lib.functionArgs, so a functor (a function made
      # by setFunctionArgs or makeOverridable) is called with its own arguments too.
      auto = builtins.intersectAttrs (lib.functionArgs f) scope;
    in
    lib.makeOverridable f (auto // args);

  base =
    final:
    let
      callPackage = callPackageWith final;
      mkCudaPackages =
        version:
        import ./cuda-packages.nix {
          inherit lib db system;
          inherit (final) stdenv;
          config = resolvedConfig;
          cudaMajorMinorVersion = version;
          extend = final.extend;
          pkgs = final;
        };
    in
    {
      # `pkgs.path`: the nixpkgs source, so overlays can re-import it (NIXPKGS.md section 1).
      path = ./.;
      config = resolvedConfig;
      inherit system;

      # all-packages.nix: `inherit lib config overlays;` -- the overlays the set was made with.
      # `lib` here holds only the few functions lib.nix copies (a missing one fails, as it
      # should); `lib.functionArgs pkg.override` reads a recipe's arguments as in real nixpkgs.
      inherit lib overlays;

      stdenv = import ./stdenv.nix {
        inherit lib;
        hostPlatform = crossSystem;
        buildPlatform = localSystem;
        config = resolvedConfig;
      };

      # all-packages.nix: `pythonPackagesExtensions = [ ];`, applied to every interpreter's
      # package set (pkgs/development/interpreters/python/passthrufun.nix).
      pythonPackagesExtensions = [ ];
      inherit (final.stdenv) mkDerivation;

      callPackage = callPackage;

      # lib.extend-style re-instantiation with one more overlay (pkgs.extend in real nixpkgs).
      extend =
        overlay:
        nixpkgsFun {
          overlays = overlays ++ [ overlay ];
          via = "extend";
        };

      _cuda = {
        db = {
          inherit (db) allSortedCudaCapabilities cudaCapabilityToInfo;
        };
      };

      # Real set names (pkgs/top-level/cuda-packages.nix); the aliases as of mid-2026.
      cudaPackages_12_6 = mkCudaPackages "12.6";
      cudaPackages_12_8 = mkCudaPackages "12.8";
      cudaPackages_12_9 = mkCudaPackages "12.9";
      cudaPackages_13_0 = mkCudaPackages "13.0";
      cudaPackages_13_1 = mkCudaPackages "13.1";
      cudaPackages_13_2 = mkCudaPackages "13.2";
      cudaPackages_13_3 = mkCudaPackages "13.3";
      cudaPackages_12 = final.cudaPackages_12_9;
      cudaPackages_13 = final.cudaPackages_13_2;
      cudaPackages = final.cudaPackages_12_9;

      # pkgs/top-level/variants.nix
      pkgsCuda = nixpkgsFun {
        config = config // {
          cudaSupport = true;
          rocmSupport = false;
        };
        via = "pkgsCuda";
      };
      # variants.nix: "Full package set with rocm on cuda off".
      pkgsRocm = nixpkgsFun {
        config = config // {
          cudaSupport = false;
          rocmSupport = true;
        };
        via = "pkgsRocm";
      };
      pkgsForCudaArch = builtins.listToAttrs (
        map (cudaCapability: {
          name = "sm_" + lib.dropDots cudaCapability;
          value = nixpkgsFun {
            config = config // {
              cudaSupport = true;
              rocmSupport = false;
              # variants.nix: "Not supported by architecture-specific feature sets, so disable for all."
              cudaForwardCompat = false;
              cudaCapabilities = [ cudaCapability ];
            };
            via = "pkgsForCudaArch";
          };
        }) db.allSortedCudaCapabilities
      );

      # pkgs/development/rocm-modules/default.nix (all-packages.nix: `rocmPackages =
      # recurseIntoAttrs (callPackage ../development/rocm-modules { })`): one ROCm version.
      rocmPackages = import ./rocm-packages.nix {
        inherit lib;
        inherit (final) stdenv;
      };

      magma = callPackage ./magma.nix { };
      # all-packages.nix: the HIP magma whatever the set's config says.
      magma-hip = final.magma.override {
        cudaSupport = false;
        rocmSupport = true;
      };
      # nixpkgs marks the dynamic CUDA magma broken; torch uses the static one (all-packages.nix).
      magma-cuda-static = final.magma.override {
        cudaSupport = true;
        static = true;
      };
      onnxruntime = callPackage ./onnxruntime.nix { };
      llama-cpp = callPackage ./llama-cpp.nix { };
      # CPU-side packages (kb/cpu_packages.json): GROMACS compiles for one SIMD level
      # (cpuAcceleration); OpenBLAS picks its kernels at run time unless told a target;
      # oneDNN JITs for the CPU it runs on.
      gromacs = callPackage ./gromacs.nix { };
      openblas = callPackage ./openblas.nix { };
      onednn = callPackage ./onednn.nix { };
      ollama = callPackage ./ollama.nix { };
      # A package no fleet plans whose store path `cudaSupport`/`rocmSupport` change (the
      # machine module must leave its path alone).
      blender = callPackage ./blender.nix { };

      python3Packages = import ./python-packages.nix {
        inherit lib callPackageWith;
        pkgs = final;
      };
      python3 = final.python3Packages.python;

      # Development tools used by the flake's devShell and formatter: records only.
      mkShell = import ./mk-shell.nix { inherit (final) stdenv; };
      ruff = final.stdenv.mkDerivation {
        pname = "ruff";
        version = "0.12.8";
        record.package = "ruff";
        meta.mainProgram = "ruff";
      };
      nixfmt = final.stdenv.mkDerivation {
        pname = "nixfmt";
        version = "1.0.0";
        record = {
          package = "nixfmt";
          note = "stand-in: records only, formats nothing";
        };
        meta.mainProgram = "nixfmt";
      };
    };

  composed = lib.foldl' (f: overlay: lib.extends overlay f) base overlays;
  pkgs = lib.fix composed;

  shown = {
    allowUnfree = resolvedConfig.allowUnfree;
    cudaSupport = resolvedConfig.cudaSupport;
    cudaCapabilities = resolvedConfig.cudaCapabilities;
    cudaForwardCompat = resolvedConfig.cudaForwardCompat;
    rocmSupport = resolvedConfig.rocmSupport;
  };
  prefix =
    if via == "import" then "capplan-standin: import" else "capplan-standin: instantiate via=${via}";
in
builtins.trace "${prefix} system=${system} config=${builtins.toJSON shown}" pkgs
