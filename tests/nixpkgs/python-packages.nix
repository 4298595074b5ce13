# Stand-in for python3Packages (pkgs/top-level/python-packages.nix).
#
# HONEST LIMIT: the stand-in cannot build Python.  buildPythonPackage/buildPythonApplication
# produce the same kind of JSON record as every other stand-in package (name, format, source
# path, dependency store paths); there is no interpreter and no bin/ script in the output.  They
# exist so that `packages.<system>.capplan` and the devShell evaluate (and their derivations
# build) against the stand-in; running capplan from Nix needs real nixpkgs.
{
  lib,
  pkgs,
  callPackageWith,
}:
let
  pythonVersion = "3.13";

  buildPythonPackage =
    {
      pname,
      version,
      pyproject ? null,
      format ? null,
      src ? null,
      build-system ? [ ],
      dependencies ? [ ],
      propagatedBuildInputs ? [ ],
      buildInputs ? [ ],
      nativeCheckInputs ? [ ],
      pythonImportsCheck ? [ ],
      record ? { },
      env ? { },
      passthru ? { },
      meta ? { },
      requiredSystemFeatures ? [ ],
      backendStdenv ? null,
      # "python3.13-" for libraries; applications are named without it, as in real nixpkgs.
      namePrefix ? "python${pythonVersion}-",
      ...
    }:
    # Real buildPythonPackage insists on one of the two (mk-python-derivation.nix).
    assert lib.assertMsg (
      pyproject != null || format != null
    ) "${pname}: neither `pyproject` nor `format` is set (stand-in, like mk-python-derivation.nix)";
    pkgs.stdenv.mkDerivation {
      inherit
        pname
        version
        env
        meta
        requiredSystemFeatures
        backendStdenv
        ;
      inherit namePrefix;
      passthru = passthru // {
        inherit dependencies;
        pythonModule = python;
      };
      record = {
        package = pname;
        inherit version;
        python = pythonVersion;
        format = if pyproject == true then "pyproject" else format;
        src = if src == null then null else "${src}";
        dependencies = map (d: "${d}") (dependencies ++ propagatedBuildInputs);
        build-system = map (d: "${d}") build-system;
        buildInputs = map (d: "${d}") buildInputs;
        inherit pythonImportsCheck;
      }
      // record;
    };

  # Leaf packages capplan and its tests need: records only.
  leaf =
    pname: version:
    buildPythonPackage {
      inherit pname version;
      pyproject = true;
      meta.license = {
        shortName = "free";
        free = true;
      };
    };

  python = import ./python-interpreter.nix {
    inherit (pkgs) system;
    inherit pythonVersion;
    passthru = {
      pkgs = self;
      inherit pythonVersion;
      sitePackages = "lib/python${pythonVersion}/site-packages";
    };
  };

  # The package set is a fixed point extended by the top-level `pythonPackagesExtensions`, as in
  # pkgs/development/interpreters/python/passthrufun.nix (`extensions = composeManyExtensions
  # ([ hooks pythonExtension ] ++ pythonPackagesExtensions ++ [ overrides ])`): an extension
  # that replaces `torch` is what every other package of the set (torchvision) receives.
  base =
    self:
    let
      callPackage = callPackageWith (pkgs // self);
    in
    {
      inherit python buildPythonPackage callPackage;
      buildPythonApplication = args: buildPythonPackage ({ namePrefix = ""; } // args);

      torch = callPackage ./torch.nix { };
      # python-packages.nix: `torchWithRocm = torch.override { cudaSupport = false; rocmSupport =
      # true; triton = triton-no-cuda; }` (the stand-in has no triton).
      torchWithRocm = self.torch.override {
        cudaSupport = false;
        rocmSupport = true;
      };
      torchvision = callPackage ./torchvision.nix { };
      cupy = callPackage ./cupy.nix { };
      # A dependant of torch (as transformers' torch extra is): built against the set's torch.
      accelerate = callPackage ./accelerate.nix { };

      setuptools = leaf "setuptools" "80.9.0";
      click = leaf "click" "8.2.1";
      pydantic = leaf "pydantic" "2.11.7";
      networkx = leaf "networkx" "3.5";
      requests = leaf "requests" "2.32.5";
      rich = leaf "rich" "14.1.0";
      packaging = leaf "packaging" "25.0";
      pyelftools = leaf "pyelftools" "0.32";
      archspec = leaf "archspec" "0.2.5";
      cryptography = leaf "cryptography" "45.0.6";
      pytest = leaf "pytest" "8.4.1";
      hypothesis = leaf "hypothesis" "6.136.0";
      mypy = leaf "mypy" "1.17.1";
      ruff = leaf "ruff" "0.12.8";
      types-requests = leaf "types-requests" "2.32.4";
      numpy = leaf "numpy" "2.3.2";
      fastrlock = leaf "fastrlock" "0.8.3";
      pillow = leaf "pillow" "11.3.0";
    };

  self = lib.fix (lib.foldl' (f: extension: lib.extends extension f) base pkgs.pythonPackagesExtensions);
in
self
