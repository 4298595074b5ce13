# Follows NixOS/nixpkgs pkgs/development/rocm-modules/miopen/default.nix at 0030acac9e980e5b2e3eb2828d4c61e7bd86ddea, composable_kernel/default.nix at 0a381e31812d27774d12b328fd9c2f38b006591a and base.nix at 77dc9f4bd250c775aa1d7b072c11b7935fc045d6, migraphx/default.nix at a3961166adbf51c5951777d5a7b78c0d46b0b110
# Stand-in for `rocmPackages` (pkgs/development/rocm-modules/default.nix, ROCm 7.2 as in
# nixos-unstable mid-2026; ../../shared/ROCM.md restates it).
#
# - One scope (`lib.makeScope newScope`) whose `overrideScope` re-fixes it with one more
#   extension; per-target scopes `rocmPackages.gfx942` (one per entry of `clr.gpuTargets`) and
#   family scopes gfx9/gfx10/gfx11/gfx12 are `scopeForArches` = `outer.overrideScope` with
#   `clr = prev.clr.override { localGpuTargets = arches; }` (default.nix, bottom).  The
#   per-target scopes are attributes of the outer set only, as there (`rocmPackages.gfx942`
#   has no `gfx942`).
# - clr (pkgs/development/rocm-modules/clr/default.nix): `passthru.gpuTargets` = the 16 default
#   targets; `localGpuTargets ? null` is an argument that only reaches passthru, and only when
#   set (`lib.optionalAttrs (localGpuTargets != null) { inherit localGpuTargets; gpuArchSuffix =
#   "-" + concatStringsSep "-" localGpuTargets; }`), so `clr.localGpuTargets or clr.gpuTargets`
#   works and clr's own store path is the same in every scope; `gpuArchSuffix` is "" otherwise.
# - Target-dependent libraries read `clr.localGpuTargets or clr.gpuTargets` and are named
#   `<pname>${clr.gpuArchSuffix}` (rocblas/default.nix, hipblaslt/default.nix,
#   composable_kernel/default.nix: `rocblas-gfx942-7.2.3`); their target list goes into the
#   build, so their store paths differ per scope.
# - Target-independent packages (rocminfo, hipcc, rocm-runtime, rocm-comgr, clr) do not read
#   the targets: the same store path in every scope.
{
  lib,
  stdenv,
}:
let
  version = "7.2.3";

  free = {
    shortName = "mit";
    free = true;
  };

  # lib.makeScope reduced: a fixed point with `overrideScope` (extends the scope function) and
  # `callPackage` (the scope's own attributes as arguments).
  makeScope =
    f:
    let
      self = f self // {
        overrideScope = g: makeScope (lib.extends g f);
        callPackage = fn: args: lib.makeOverridable fn (builtins.intersectAttrs (builtins.functionArgs fn) self // args);
      };
    in
    self;

  # Records only the targets and the store paths it was built against.
  rocmDerivation =
    {
      pname,
      record ? { },
      env ? { },
      passthru ? { },
      meta ? { },
      requiredSystemFeatures ? [ ],
    }:
    stdenv.mkDerivation {
      inherit
        pname
        version
        env
        passthru
        requiredSystemFeatures
        ;
      record = {
        package = pname;
        rocm = version;
      }
      // record;
      meta = {
        license = free;
      }
      // meta;
    };

  # A package that never reads the GPU targets (the same derivation in every scope).
  targetIndependent =
    pname:
    rocmDerivation {
      inherit pname;
      record.targetIndependent = true;
    };

  # clr/default.nix passthru.gpuTargets (the nixpkgs default list, ROCM.md "Default targets").
  defaultGpuTargets = [
    "gfx900"
    "gfx906"
    "gfx908"
    "gfx90a"
    "gfx942"
    "gfx950"
    "gfx1010"
    "gfx1030"
    "gfx1100"
    "gfx1101"
    "gfx1102"
    "gfx1103"
    "gfx1150"
    "gfx1151"
    "gfx1200"
    "gfx1201"
  ];

  scope = self: {
    inherit version;

    rocm-runtime = targetIndependent "rocm-runtime";
    rocm-comgr = targetIndependent "rocm-comgr";
    rocminfo = targetIndependent "rocminfo";
    hipcc = targetIndependent "hipcc";

    # clr/default.nix
    clr = self.callPackage (
      {
        rocm-runtime,
        rocm-comgr,
        rocminfo,
        hipcc,
        localGpuTargets ? null,
      }:
      rocmDerivation {
        pname = "clr";
        record.dependencies = {
          rocm-runtime = "${rocm-runtime}";
          rocm-comgr = "${rocm-comgr}";
          rocminfo = "${rocminfo}";
          hipcc = "${hipcc}";
        };
        passthru = {
          gpuTargets = defaultGpuTargets;
          gpuArchSuffix = "";
          selectGpuTargets = { supported ? [ ] }: supported;
        }
        // (
          if localGpuTargets != null then
            {
              inherit localGpuTargets;
              gpuArchSuffix = "-" + builtins.concatStringsSep "-" localGpuTargets;
              selectGpuTargets =
                { supported ? [ ] }:
                if supported == [ ] then localGpuTargets else lib.intersectLists localGpuTargets supported;
            }
          else
            { }
        );
      }
    ) { };

    # rocblas/default.nix: `gpuTargets ? (clr.localGpuTargets or clr.gpuTargets)`, all of them.
    rocblas = self.callPackage (
      {
        clr,
        gpuTargets ? (clr.localGpuTargets or clr.gpuTargets),
      }:
      rocmDerivation {
        pname = "rocblas${clr.gpuArchSuffix}";
        requiredSystemFeatures = [ "big-parallel" ];
        env.GPU_TARGETS = builtins.concatStringsSep ";" gpuTargets;
        record = {
          inherit gpuTargets;
          dependencies.clr = "${clr}";
        };
        passthru = { inherit gpuTargets; };
      }
    ) { };

    # hipblaslt/default.nix: targets ∩ its list; with none left it still builds, for gfx1200
    # only and with HIPBLASLT_ENABLE_DEVICE off (a device-less shim; passthru.supportsTargetArches).
    hipblaslt = self.callPackage (
      {
        clr,
        gpuTargets ? (clr.localGpuTargets or clr.gpuTargets),
      }:
      let
        supportedTargets = lib.intersectLists gpuTargets [
          "gfx908"
          "gfx90a"
          "gfx942"
          "gfx950"
          "gfx1100"
          "gfx1101"
          "gfx1150"
          "gfx1151"
          "gfx1200"
          "gfx1201"
        ];
        supportsTargetArches = supportedTargets != [ ];
        gpuTargets' =
          if supportsTargetArches then builtins.concatStringsSep ";" supportedTargets else "gfx1200";
      in
      rocmDerivation {
        pname = "hipblaslt${clr.gpuArchSuffix}";
        requiredSystemFeatures = [ "big-parallel" ];
        env.GPU_TARGETS = gpuTargets';
        record = {
          GPU_TARGETS = gpuTargets';
          HIPBLASLT_ENABLE_DEVICE = supportsTargetArches;
          dependencies.clr = "${clr}";
        };
        passthru = { inherit supportsTargetArches; };
      }
    ) { };

    # composable_kernel/base.nix + default.nix: `gpuTargets ? (clr.localGpuTargets or [ 900 906
    # 908 90a 942 950 and the generic targets ])`; meta.broken = !anyGfx9Target ("Builds without
    # any gfx9 fail"); passthru anyGfx9Target, anyMfmaTarget (908 90a 942 950).
    composable_kernel = self.callPackage (
      {
        clr,
        gpuTargets ? (
          clr.localGpuTargets or [
            "gfx900"
            "gfx906"
            "gfx908"
            "gfx90a"
            "gfx942"
            "gfx950"
            "gfx10-3-generic"
            "gfx11-generic"
            "gfx12-generic"
          ]
        ),
      }:
      let
        anyGfx9Target = builtins.any (t: builtins.substring 0 4 t == "gfx9") gpuTargets;
        anyMfmaTarget =
          lib.intersectLists gpuTargets [
            "gfx908"
            "gfx90a"
            "gfx942"
            "gfx950"
          ] != [ ];
      in
      rocmDerivation {
        pname = "composable_kernel${clr.gpuArchSuffix}";
        requiredSystemFeatures = [ "big-parallel" ];
        env.GPU_ARCHS = builtins.concatStringsSep ";" gpuTargets;
        record = {
          GPU_ARCHS = builtins.concatStringsSep ";" gpuTargets;
          dependencies.clr = "${clr}";
        };
        passthru = { inherit gpuTargets anyGfx9Target anyMfmaTarget; };
        meta.broken = !anyGfx9Target;
      }
    ) { };

    # miopen/default.nix (MIOpen 7.2.1, read at 0030acac): targets ∩ its list
    # ("supportedTargets"); `withComposableKernel ? true` puts composable_kernel in buildInputs
    # whatever the targets (ROCm 6.4.3's MIOpen defaulted to `composable_kernel.anyMfmaTarget`),
    # so evaluating MIOpen in a scope without a gfx9 target meets composable_kernel's
    # meta.broken; `withComposableKernel = false` is the way out (MIOPEN_USE_COMPOSABLEKERNEL
    # off).  big-parallel.  Its pname has no suffix; its store path still differs per scope.
    miopen = self.callPackage (
      {
        clr,
        rocblas,
        hipblaslt,
        composable_kernel,
        gpuTargets ? (clr.localGpuTargets or clr.gpuTargets),
        withComposableKernel ? true,
      }:
      let
        supportedTargets = lib.intersectLists [
          "gfx900"
          "gfx906"
          "gfx908"
          "gfx90a"
          "gfx942"
          "gfx950"
          "gfx1030"
          "gfx1031"
          "gfx1100"
          "gfx1101"
          "gfx1102"
          "gfx1150"
          "gfx1151"
          "gfx1200"
          "gfx1201"
        ] gpuTargets;
      in
      rocmDerivation {
        pname = "miopen";
        requiredSystemFeatures = [ "big-parallel" ];
        env.GPU_TARGETS = builtins.concatStringsSep ";" supportedTargets;
        record = {
          GPU_TARGETS = builtins.concatStringsSep ";" supportedTargets;
          MIOPEN_USE_COMPOSABLEKERNEL = withComposableKernel;
          dependencies = {
            clr = "${clr}";
            rocblas = "${rocblas}";
            hipblaslt = "${hipblaslt}";
            composable_kernel = if withComposableKernel then "${composable_kernel}" else null;
          };
        };
      }
    ) { };

    # migraphx/default.nix (MIGraphX 7.1.1; the stored version, a3961166adbf): `gpuTargets ?
    # clr.gpuTargets` (the default list, NOT the scope's localGpuTargets: a per-target scope
    # rebuilds it for all 16 targets), -DGPU_TARGETS=<;-joined>; links rocblas, hipblas,
    # hipblaslt and miopen of its scope (so MIOpen's composable_kernel rule reaches it).
    migraphx = self.callPackage (
      {
        clr,
        rocblas,
        hipblas,
        hipblaslt,
        miopen,
        gpuTargets ? clr.gpuTargets,
      }:
      rocmDerivation {
        pname = "migraphx";
        env.GPU_TARGETS = builtins.concatStringsSep ";" gpuTargets;
        record = {
          GPU_TARGETS = builtins.concatStringsSep ";" gpuTargets;
          dependencies = {
            clr = "${clr}";
            rocblas = "${rocblas}";
            hipblas = "${hipblas}";
            hipblaslt = "${hipblaslt}";
            miopen = "${miopen}";
          };
        };
      }
    ) { };

    # hipblas: rocBLAS/hipBLASLt behind one API; no target list of its own (what magma links).
    hipblas = self.callPackage (
      {
        clr,
        rocblas,
        hipblaslt,
      }:
      rocmDerivation {
        pname = "hipblas";
        record.dependencies = {
          clr = "${clr}";
          rocblas = "${rocblas}";
          hipblaslt = "${hipblaslt}";
        };
      }
    ) { };
  };

  outer = makeScope scope;

  # default.nix: scopeForArches
  scopeForArches =
    arches:
    outer.overrideScope (
      _final: prev: {
        clr = prev.clr.override { localGpuTargets = arches; };
      }
    );
in
outer
// builtins.listToAttrs (
  map (arch: {
    name = arch;
    value = scopeForArches [ arch ];
  }) outer.clr.gpuTargets
)
// {
  gfx9 = scopeForArches [
    "gfx906"
    "gfx908"
    "gfx90a"
    "gfx942"
  ];
  gfx10 = scopeForArches [
    "gfx1010"
    "gfx1030"
  ];
  gfx11 = scopeForArches [
    "gfx1100"
    "gfx1101"
    "gfx1102"
    "gfx1150"
    "gfx1151"
  ];
  gfx12 = scopeForArches [
    "gfx1200"
    "gfx1201"
  ];
}
