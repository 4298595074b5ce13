# Stand-in for pkgs/development/python-modules/accelerate/default.nix at NixOS/nixpkgs 05924f714f31ff83bd10ed1710638688999c3725:
# a Python package that takes `torch` from its own package set as a dependency
# (propagatedBuildInputs: numpy, packaging, psutil, pyyaml, torch; the stand-in keeps numpy,
# packaging and torch), as transformers' `torch` extra does: with torch replaced through
# `pythonPackagesExtensions` it is built against that torch (its record names torch's path).
{
  buildPythonPackage,
  numpy,
  packaging,
  torch,
}:
buildPythonPackage {
  pname = "accelerate";
  version = "1.10.0";
  pyproject = true;
  dependencies = [
    numpy
    packaging
    torch
  ];
  record.torch = "${torch}";
  meta.license = {
    shortName = "asl20";
    free = true;
  };
}
