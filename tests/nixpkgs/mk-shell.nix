# Stand-in for pkgs.mkShell: a record of the shell's packages (it cannot be entered).
{ stdenv }:
{
  name ? "nix-shell",
  packages ? [ ],
  ...
}:
stdenv.mkDerivation {
  pname = name;
  version = "0";
  record = {
    package = "mkShell";
    packages = map (p: "${p}") packages;
  };
}
