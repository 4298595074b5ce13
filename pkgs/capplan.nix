/**
  capplan, the planner CLI, built from ../planner (pyproject.toml, setuptools backend) with
  nixpkgs' `python3Packages.buildPythonApplication`.

  Called like a callPackage file: the flake passes `python3Packages` from the nixpkgs input.

  # Inputs

  `python3Packages`
  : the Python package set providing buildPythonApplication, setuptools and capplan's
    dependencies (planner/pyproject.toml `[project] dependencies`).
*/
{ python3Packages }:
let
  pyproject = builtins.fromTOML (builtins.readFile ../planner/pyproject.toml);

  # Only the files the wheel needs: no egg-info, caches or virtualenvs from a developer's tree,
  # so the source hash (and the store path) follows the real sources only.
  src = builtins.path {
    name = "capplan-source";
    path = ../planner;
    filter =
      path: type:
      let
        base = baseNameOf path;
      in
      !(
        base == "__pycache__"
        || base == ".mypy_cache"
        || base == ".pytest_cache"
        || base == ".ruff_cache"
        || base == ".venv"
        || base == "build"
        || base == "dist"
        || builtins.match ".*\\.egg-info" base != null
        || builtins.match ".*\\.pyc" base != null
      );
  };
  # planner/pyproject.toml `[project] dependencies`, as a function of a Python package set so
  # the flake's devShell (python3.withPackages) reuses the one list.
  pythonDependencies =
    ps: with ps; [
      click
      pydantic
      networkx
      requests
      rich
      packaging
      cryptography
      archspec
    ];
in
python3Packages.buildPythonApplication {
  pname = "capplan";
  inherit (pyproject.project) version;
  pyproject = true;
  inherit src;

  build-system = [ python3Packages.setuptools ];

  dependencies = pythonDependencies python3Packages;

  passthru = { inherit pythonDependencies; };

  # The test suite lives outside planner/ (tests/ at the repository root); an import check
  # keeps the build honest without it.
  pythonImportsCheck = [
    "capplan"
    "capplan.cli.main"
  ];

  meta = {
    inherit (pyproject.project) description;
    mainProgram = "capplan";
  };
}
