# Stand-in for stdenv.mkDerivation + pkgs/stdenv/generic/check-meta.nix.
#
# Every package is a tiny real derivation: builder /bin/sh, no store dependencies except other
# stand-in packages, output = one JSON file (the package's `record`: what it was asked to build
# and the store paths of its dependencies).  Evaluating `drvPath`/`outPath` runs the same
# licence check as real nixpkgs and throws its message (check-meta.nix `handle`, remediations.nix).
{
  lib,
  hostPlatform,
  buildPlatform,
  config,
}:
let
  inherit (hostPlatform) system;
  # check-meta.nix: allowBroken = config.allowBroken || getEnv "NIXPKGS_ALLOW_BROKEN" == "1"
  allowBroken = config.allowBroken or false || builtins.getEnv "NIXPKGS_ALLOW_BROKEN" == "1";
  # check-meta.nix: allowUnfree = config.allowUnfree || getEnv "NIXPKGS_ALLOW_UNFREE" == "1"
  allowUnfree = config.allowUnfree || builtins.getEnv "NIXPKGS_ALLOW_UNFREE" == "1";
  predicate = config.allowUnfreePredicate or null;

  isUnfree =
    licenses:
    if builtins.isList licenses then
      builtins.any (l: !(l.free or false)) licenses
    else if builtins.isAttrs licenses then
      !(licenses.free or true)
    else
      false;
  hasUnfreeLicense = attrs: attrs ? meta.license && isUnfree attrs.meta.license;
  hasDeniedUnfreeLicense =
    attrs:
    !allowUnfree && hasUnfreeLicense attrs && !(builtins.isFunction predicate && predicate attrs);

  showLicense =
    value:
    toString (map (v: v.shortName or v.fullName or "unknown") (if builtins.isList value then value else [ value ]));

  # remediations.nix: remediate_allowlist "Unfree" (remediate_predicate "allowUnfreePredicate" attrs)
  remediation = attrs: ''
    a) To temporarily allow unfree packages, you can use an environment variable
       for a single invocation of the nix tools.

         $ export NIXPKGS_ALLOW_UNFREE=1

       Note: When using `nix shell`, `nix build`, `nix develop`, etc with a flake,
             then pass `--impure` in order to allow use of environment variables.

    b) For `nixos-rebuild` you can set
      { nixpkgs.config.allowUnfree = true; }
    in configuration.nix to override this.

    Alternatively you can configure a predicate to allow specific packages:
      { nixpkgs.config.allowUnfreePredicate = pkg: builtins.elem (lib.getName pkg) [
          "${attrs.pname}"
        ];
      }

    c) For `nix-env`, `nix-build`, `nix-shell` or any other Nix command you can add
      { allowUnfree = true; }
    to ~/.config/nixpkgs/config.nix.
  '';

  position =
    attrs:
    let
      pos = builtins.unsafeGetAttrPos "pname" attrs;
    in
    if pos == null then "«unknown-file»" else "${pos.file}:${toString pos.line}";

  # check-meta.nix `handle`: "Refusing to evaluate package '<name>' in <pos> because it <msg>"
  # remediations.nix: remediate_allowlist "Broken"
  brokenRemediation = ''
    a) To temporarily allow broken packages, you can use an environment variable
       for a single invocation of the nix tools.

         $ export NIXPKGS_ALLOW_BROKEN=1

       Note: When using `nix shell`, `nix build`, `nix develop`, etc with a flake,
             then pass `--impure` in order to allow use of environment variables.

    b) For `nixos-rebuild` you can set
      { nixpkgs.config.allowBroken = true; }
    in configuration.nix to override this.

    c) For `nix-env`, `nix-build`, `nix-shell` or any other Nix command you can add
      { allowBroken = true; }
    to ~/.config/nixpkgs/config.nix.
  '';

  # check-meta.nix `checkValidity`: a package whose meta.badPlatforms names the host system
  # (the CUDA packages' platformAssertions turn into badPlatforms through
  # _cuda/lib _mkMetaBadPlatforms) is "not available on the requested hostPlatform".
  badPlatform = attrs: builtins.elem system (attrs.meta.badPlatforms or [ ]);

  validity =
    attrs: name:
    # check-meta.nix checks unfree, then broken, then the platform.
    if hasDeniedUnfreeLicense attrs then
      throw (
        "Refusing to evaluate package '${name}' in ${position attrs} because it has an unfree license (‘${showLicense attrs.meta.license}’)"
        + "\n${remediation attrs}"
      )
    else if !allowBroken && (attrs.meta.broken or false) then
      throw (
        "Refusing to evaluate package '${name}' in ${position attrs} because it is marked as broken"
        + "\n${brokenRemediation}"
      )
    else if !(config.allowUnsupportedSystem or false) && badPlatform attrs then
      throw "Refusing to evaluate package '${name}' in ${position attrs} because it is not available on the requested hostPlatform:\n  hostPlatform.system = \"${system}\"\n  package.meta.badPlatforms = ${builtins.toJSON attrs.meta.badPlatforms}"
    else
      true;

  mkDerivation =
    attrs@{
      pname,
      version,
      # What the builder writes to $out (as JSON).
      record ? { },
      # Extra environment variables of the build (e.g. TORCH_CUDA_ARCH_LIST).
      env ? { },
      passthru ? { },
      meta ? { },
      requiredSystemFeatures ? [ ],
      # The CUDA backendStdenv a CUDA package is built with: forcing it runs the capability
      # assertions, as building with the real cudaPackages.backendStdenv does.
      backendStdenv ? null,
      namePrefix ? "",
      # Files of the output, for packages whose output is a folder (a shared library's
      # lib/libfoo.so.0): each holds the record. Without it the output is the record itself.
      outputFiles ? [ ],
      ...
    }:
    let
      name = "${namePrefix}${pname}-${version}";
      # make-derivation.nix: a name set in `env` and as a derivation argument is an error.
      overlapping = builtins.filter (n: attrs ? ${n}) (builtins.attrNames env);
      envChecked =
        if overlapping == [ ] then
          true
        else
          throw (
            "The `env` attribute set cannot contain any attributes passed to derivation. The following attributes are overlapping:\n"
            + builtins.concatStringsSep "\n" (
              map (n: "  - ${n}: in `env`: ${builtins.toJSON env.${n}}; in derivation arguments: ${builtins.toJSON attrs.${n}}") overlapping
            )
          );
      # The compiler flags the build would see (top level, as older recipes set them, or in
      # `env`), recorded so tests can read what a CPU-level variant was built with.
      cflags =
        if attrs ? NIX_CFLAGS_COMPILE then
          attrs.NIX_CFLAGS_COMPILE
        else
          env.NIX_CFLAGS_COMPILE or null;
      fullRecord = record // (if cflags == null then { } else { NIX_CFLAGS_COMPILE = toString cflags; });
      checked = builtins.seq envChecked (
        builtins.seq (validity attrs name) (
          if backendStdenv == null then true else builtins.seq backendStdenv.assertionsHold true
        )
      );
      drv = derivation (
        env
        // (if attrs ? NIX_CFLAGS_COMPILE then { NIX_CFLAGS_COMPILE = toString attrs.NIX_CFLAGS_COMPILE; } else { })
        // {
          inherit name system;
          builder = "/bin/sh";
          args = [
            "-c"
            (
              if outputFiles == [ ] then
                ''printf '%s\n' "$record" > "$out"''
              else
                builtins.concatStringsSep "\n" (
                  map (f: ''/bin/mkdir -p "$(/usr/bin/dirname "$out/${f}")" && printf '%s\n' "$record" > "$out/${f}"'') outputFiles
                )
            )
          ];
          record = builtins.toJSON fullRecord;
        }
        // (if requiredSystemFeatures == [ ] then { } else { inherit requiredSystemFeatures; })
      );
      self =
        passthru
        // {
          type = "derivation";
          inherit
            name
            pname
            version
            system
            ;
          meta = {
            inherit name;
            position = position attrs;
            # check-meta.nix: false where evaluating the package would be refused for its
            # platform (what torch's `cudaPackages.nccl.meta.available` reads).
            available = !badPlatform attrs;
          }
          // meta;
          drvPath = builtins.seq checked drv.drvPath;
          outPath = builtins.seq checked drv.outPath;
          outputName = "out";
          outputs = [ "out" ];
          out = self;
          all = [ self ];
          inherit requiredSystemFeatures;
          drvAttrs = {
            inherit name system;
            record = fullRecord;
          };
          # make-derivation.nix `overrideAttrs`: the same arguments changed by `f` (old
          # attributes in; a function of them, or of final and previous ones, out).
          overrideAttrs =
            f:
            let
              changed = f attrs;
            in
            mkDerivation (attrs // (if builtins.isFunction changed then changed attrs else changed));
        };
    in
    self;
in
{
  inherit mkDerivation hostPlatform buildPlatform;
}
