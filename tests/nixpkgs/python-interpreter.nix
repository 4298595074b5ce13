# Stand-in for the python3 interpreter and python3.withPackages
# (pkgs/development/interpreters/python/cpython/default.nix, .../python/wrapper.nix).
#
# Real python3 is a store path with bin/python3; real `withPackages f` is a buildEnv of the
# interpreter and the closure of `f ps` whose bin/python3 wrapper makes those packages importable
# (wrapper.nix sets NIX_PYTHONPATH / NIX_PYTHONPREFIX for the sitecustomize). The stand-in cannot
# build Python: its interpreter is a two-line script that runs the machine's /usr/bin/python3
# (the tests' Debian has it; Nix there builds without a sandbox), and its environments export
# NIX_PYTHONPATH with the listed packages' store paths, so a test can see which packages an
# environment holds. Every path the scripts name is a string in the derivation, so the
# environment references (keeps alive) each package it lists, as the real buildEnv does.
{
  system,
  pythonVersion,
  passthru,
}:
let
  script =
    name: body:
    derivation {
      inherit name system;
      builder = "/bin/sh";
      args = [
        "-c"
        ''
          /bin/mkdir -p "$out/bin"
          printf '%s\n' "#!/bin/sh" "$body" > "$out/bin/python3"
          /bin/chmod +x "$out/bin/python3"
          /bin/ln -s python3 "$out/bin/python"
        ''
      ];
      inherit body;
    };
  interpreter = script "python3-${pythonVersion}.5" ''exec /usr/bin/python3 "$@"'';
  withPackages =
    f:
    let
      listed = f passthru.pkgs;
    in
    script "python3-${pythonVersion}.5-env" ''
      export NIX_PYTHONPATH='${builtins.concatStringsSep ":" (map (p: "${p}") listed)}'
      exec ${interpreter}/bin/python3 "$@"
    '';
in
interpreter
// passthru
// {
  inherit withPackages;
  pname = "python3";
  version = "${pythonVersion}.5";
  interpreter = "${interpreter}/bin/python3";
}
