# Stand-in for one `cudaPackages_X_Y` set (pkgs/development/cuda-modules/): `flags`,
# `backendStdenv` with its capability assertions, a few redistributables, nccl and `.pkgs`.
#
# Sources imitated (NixOS/nixpkgs):
# - _cuda/lib/cuda.nix: _cudaCapabilityIsDefault, _cudaCapabilityIsSupported
# - packages/backendStdenv.nix: cudaCapabilities = config.cudaCapabilities or default list;
#   cudaForwardCompat = config.cudaForwardCompat or true; the assertion list and the message
#   "cudaPackages_X_Y.backendStdenv has failed assertions:\n- ...", hostRedistSystem
#   (_cuda/lib getRedistSystem) and its two Jetson checks;
# - the cudaConfig resolver of mid-2026 (cuda-modules, `_getJetsonMinSbsaCapability`): the
#   Jetson rule is "pre-SBSA": below 10.1 on CUDA 12.x, below 8.7 from CUDA 13 (Orin 8.7 and
#   Thor 11.0 use the SBSA toolkit there), a pre-SBSA Jetson capability cannot be mixed;
# - an unknown capability fails as there: `attribute '9.9' missing` while the too-old/too-new
#   lists index the capability table (no friendlier message);
# - _cuda/lib/utils.nix formatCapabilities: realArches, virtualArches, arches, gencode,
#   gencodeString, cmakeCudaArchitecturesString (forward compat = PTX of the LAST element).
{
  lib,
  db,
  system,
  stdenv,
  config,
  cudaMajorMinorVersion,
  extend,
  # The package set this CUDA set belongs to (for `.pkgs`).
  pkgs,
}:
let
  inherit (builtins) toJSON filter;
  inherit (db) allSortedCudaCapabilities cudaCapabilityToInfo;
  inherit (lib)
    versionAtLeast
    versionOlder
    intersectLists
    subtractLists
    dropDots
    last
    optional
    ;

  setName = lib.mkVersionedName "cudaPackages" cudaMajorMinorVersion;
  cudaNamePrefix = "cuda${cudaMajorMinorVersion}";

  capabilityIsDefault =
    info:
    let
      recentCapability =
        info.dontDefaultAfterCudaMajorMinorVersion == null
        || versionAtLeast info.dontDefaultAfterCudaMajorMinorVersion cudaMajorMinorVersion;
    in
    recentCapability && !info.isJetson && !info.isArchitectureSpecific && !info.isFamilySpecific;

  capabilityIsSupported =
    info:
    versionAtLeast cudaMajorMinorVersion info.minCudaMajorMinorVersion
    && (
      info.maxCudaMajorMinorVersion == null
      || versionAtLeast info.maxCudaMajorMinorVersion cudaMajorMinorVersion
    );

  supportedCudaCapabilities = filter (
    cap: capabilityIsSupported cudaCapabilityToInfo.${cap}
  ) allSortedCudaCapabilities;
  defaultCudaCapabilities = filter (
    cap: capabilityIsDefault cudaCapabilityToInfo.${cap}
  ) supportedCudaCapabilities;

  cudaCapabilities =
    if config.cudaCapabilities or [ ] != [ ] then config.cudaCapabilities else defaultCudaCapabilities;
  cudaForwardCompat = config.cudaForwardCompat or true;

  jetsonCudaCapabilities = filter (cap: cudaCapabilityToInfo.${cap}.isJetson) allSortedCudaCapabilities;
  requestedJetsonCudaCapabilities = intersectLists jetsonCudaCapabilities cudaCapabilities;
  hasJetsonCudaCapability = requestedJetsonCudaCapabilities != [ ];

  # _getJetsonMinSbsaCapability: the lowest Jetson capability that uses the SBSA toolkit.
  sbsaJetsonCapability = if versionAtLeast cudaMajorMinorVersion "13.0" then "8.7" else "10.1";
  preSbsaJetsonCudaCapabilities = filter (c: versionOlder c sbsaJetsonCapability) requestedJetsonCudaCapabilities;
  sbsaJetsonCudaCapabilities = subtractLists preSbsaJetsonCudaCapabilities requestedJetsonCudaCapabilities;

  # _cuda/lib getRedistSystem: linux-aarch64 (Jetson archives) only for pre-SBSA Jetson sets.
  hostRedistSystem =
    if system == "x86_64-linux" then
      "linux-x86_64"
    else if system == "aarch64-linux" then
      (if preSbsaJetsonCudaCapabilities == [ ] then "linux-sbsa" else "linux-aarch64")
    else
      "unsupported";

  assertions =
    let
      unrecognizedCudaCapabilities = subtractLists allSortedCudaCapabilities cudaCapabilities;
      # Real nixpkgs indexes the table with every requested capability: an unknown one fails
      # here with "attribute '<cap>' missing".
      known = cudaCapabilities;
      tooOldCudaCapabilities = filter (
        cap:
        let
          maybeMax = cudaCapabilityToInfo.${cap}.maxCudaMajorMinorVersion;
        in
        maybeMax != null && versionOlder maybeMax cudaMajorMinorVersion
      ) known;
      tooNewCudaCapabilities = filter (
        cap: versionOlder cudaMajorMinorVersion cudaCapabilityToInfo.${cap}.minCudaMajorMinorVersion
      ) known;
    in
    [
      {
        message = "Requested unrecognized CUDA capabilities: ${toJSON unrecognizedCudaCapabilities}";
        assertion = unrecognizedCudaCapabilities == [ ];
      }
      {
        message = "Requested CUDA capabilities which are too old for CUDA ${cudaMajorMinorVersion}: ${toJSON tooOldCudaCapabilities}";
        assertion = tooOldCudaCapabilities == [ ];
      }
      {
        message = "Requested CUDA capabilities which are too new for CUDA ${cudaMajorMinorVersion}: ${toJSON tooNewCudaCapabilities}";
        assertion = tooNewCudaCapabilities == [ ];
      }
      {
        message =
          "Requested pre-SBSA (${sbsaJetsonCapability}) Jetson CUDA capabilities (${toJSON preSbsaJetsonCudaCapabilities}) cannot be "
          + "specified with other capabilities (${toJSON (subtractLists preSbsaJetsonCudaCapabilities cudaCapabilities)})";
        assertion = preSbsaJetsonCudaCapabilities != [ ] -> preSbsaJetsonCudaCapabilities == cudaCapabilities;
      }
      {
        message =
          "Requested pre-SBSA (${sbsaJetsonCapability}) Jetson CUDA capabilities (${toJSON preSbsaJetsonCudaCapabilities}) require "
          + "computed NVIDIA hostRedistSystem (${hostRedistSystem}) to be linux-aarch64";
        assertion = preSbsaJetsonCudaCapabilities != [ ] -> hostRedistSystem == "linux-aarch64";
      }
      {
        message =
          "Requested SBSA (${sbsaJetsonCapability}) Jetson CUDA capabilities (${toJSON sbsaJetsonCudaCapabilities}) require "
          + "computed NVIDIA hostRedistSystem (${hostRedistSystem}) to be linux-sbsa";
        assertion = sbsaJetsonCudaCapabilities != [ ] -> hostRedistSystem == "linux-sbsa";
      }
    ];

  failedAssertionsString = lib.mkFailedAssertionsString assertions;

  backendStdenv = {
    assertionsHold = lib.assertMsg (
      failedAssertionsString == ""
    ) "${setName}.backendStdenv has failed assertions:${failedAssertionsString}";
    inherit
      cudaCapabilities
      cudaForwardCompat
      supportedCudaCapabilities
      defaultCudaCapabilities
      requestedJetsonCudaCapabilities
      hasJetsonCudaCapability
      hostRedistSystem
      ;
    hostNixSystem = system;
  };

  mkGencodeFlag = targetKind: cap: "-gencode=arch=compute_${dropDots cap},code=${targetKind}_${dropDots cap}";

  flags =
    let
      realArches = map (cap: "sm_" + dropDots cap) cudaCapabilities;
      virtualArches = map (cap: "compute_" + dropDots cap) cudaCapabilities;
      gencode =
        map (mkGencodeFlag "sm") cudaCapabilities
        ++ optional cudaForwardCompat (mkGencodeFlag "compute" (last cudaCapabilities));
    in
    # Like the real flags, evaluating them with an invalid capability list fails with the
    # backendStdenv assertion message.
    builtins.seq backendStdenv.assertionsHold {
      inherit
        cudaCapabilities
        cudaForwardCompat
        realArches
        virtualArches
        gencode
        dropDots
        ;
      arches = realArches ++ optional cudaForwardCompat (last virtualArches);
      gencodeString = builtins.concatStringsSep " " gencode;
      cmakeCudaArchitecturesString = builtins.concatStringsSep ";" (map dropDots cudaCapabilities);
      archNames = builtins.sort (a: b: a < b) (
        builtins.attrNames (
          builtins.listToAttrs (
            map (cap: {
              name = cudaCapabilityToInfo.${cap}.archName;
              value = null;
            }) cudaCapabilities
          )
        )
      );
      isJetsonBuild = hasJetsonCudaCapability;
    };

  # NVIDIA's licences (lib.licenses.nvidiaCudaRedist / nvidiaCudnn) are unfree.
  nvidiaLicense = shortName: {
    inherit shortName;
    fullName = "NVIDIA ${shortName} license";
    free = false;
  };

  # Redistributable binaries: their store paths never depend on capabilities (NIXPKGS.md 5).
  redist =
    pname: version: license:
    stdenv.mkDerivation {
      inherit pname version backendStdenv;
      namePrefix = "${cudaNamePrefix}-";
      # The archive differs per redist system (linux-aarch64 for Jetson sets, linux-sbsa
      # otherwise on aarch64): capability-independent, but not shared between the two.
      record = {
        package = pname;
        inherit version hostRedistSystem;
        cuda = cudaMajorMinorVersion;
        capabilityIndependent = true;
      };
      meta.license = nvidiaLicense license;
    };

  cudaMajorVersion = lib.versionMajor cudaMajorMinorVersion;

  self = {
    inherit
      cudaMajorMinorVersion
      cudaMajorVersion
      cudaNamePrefix
      backendStdenv
      flags
      ;
    cudaVersion = cudaMajorMinorVersion;
    cuda_cudart = redist "cuda_cudart" cudaMajorMinorVersion "CUDA-Redist";
    cuda_nvcc = redist "cuda_nvcc" cudaMajorMinorVersion "CUDA-Redist";
    cuda_nvrtc = redist "cuda_nvrtc" cudaMajorMinorVersion "CUDA-Redist";
    libcublas = redist "libcublas" cudaMajorMinorVersion "CUDA-Redist";
    libcufft = redist "libcufft" cudaMajorMinorVersion "CUDA-Redist";
    libcurand = redist "libcurand" cudaMajorMinorVersion "CUDA-Redist";
    libcusolver = redist "libcusolver" cudaMajorMinorVersion "CUDA-Redist";
    libcusparse = redist "libcusparse" cudaMajorMinorVersion "CUDA-Redist";
    libcutensor = redist "libcutensor" "2.3.1" "cuTENSOR";
    # Jetson (linux-aarch64) archives of cuDNN lag behind the SBSA/x86_64 ones.
    cudnn = redist "cudnn" (
      if hostRedistSystem == "linux-aarch64" then
        "9.3.0"
      else if cudaMajorVersion == "12" then
        "9.10.2"
      else
        "9.14.0"
    ) "cuDNN";

    # nccl builds its kernels from flags.gencodeString (makeFlags NVCC_GENCODE=...).
    nccl = stdenv.mkDerivation {
      pname = "nccl";
      version = "2.28.3";
      namePrefix = "${cudaNamePrefix}-";
      inherit backendStdenv;
      env.NVCC_GENCODE = flags.gencodeString;
      record = {
        package = "nccl";
        cuda = cudaMajorMinorVersion;
        NVCC_GENCODE = flags.gencodeString;
        inherit (flags) cudaCapabilities cudaForwardCompat;
        dependencies = {
          cuda_cudart = "${self.cuda_cudart}";
          cuda_nvcc = "${self.cuda_nvcc}";
        };
      };
      # BSD-3-Clause: free itself, but its inputs are unfree.
      meta.license = {
        shortName = "bsd3";
        free = true;
      };
      # cuda-modules/packages/nccl.nix passthru.platformAssertions: "Pre-Thor Jetson devices
      # (CUDA capabilities < 10.1) are not supported by NCCL" (assertion: !hasJetsonCudaCapability
      # || all (flip versionAtLeast "10.1") requestedJetsonCudaCapabilities), which
      # _mkMetaBadPlatforms turns into meta.badPlatforms = [ hostPlatform.system ].
      meta.badPlatforms = optional (builtins.any (
        c: versionOlder c "10.1"
      ) requestedJetsonCudaCapabilities) system;
    };

    # A whole package set in which this CUDA is the default (NIXPKGS.md 3): the set itself when
    # it already is; otherwise `extend` rebinding cudaPackages, cudaPackages_X and
    # cudaPackages_X_Y (pkgs/top-level/cuda-packages.nix).
    pkgs =
      if pkgs.cudaPackages.cudaMajorMinorVersion == cudaMajorMinorVersion then
        pkgs
      else
        extend (
          final: _:
          {
            cudaPackages = final.${setName};
            ${lib.mkVersionedName "cudaPackages" cudaMajorVersion} = final.${setName};
          }
        );
  };
in
self
