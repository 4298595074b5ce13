# Helpers the family files (./cuda.nix, ./rocm.nix, ./cpu.nix) share: the `capplan:` lines a
# bad variant fails with, the walk from a package set to a variant's package, and the overlay
# that puts a torch with its own `gpuTargets` into every Python package set.  No family is
# named here: what a family does lives in its own file.  builtins only.
let
  inherit (builtins) foldl' toJSON;
in
{
  inherit toJSON;

  # ASCII lower case (GPU names, as the knowledge base writes them, are ASCII).
  toLower = builtins.replaceStrings
    [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ]
    [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ];

  # Every match of the POSIX regex `re` in `text` replaced by `f groups` (Python's re.sub).
  replaceRe =
    re: f: text:
    builtins.concatStringsSep "" (
      map (x: if builtins.isList x then f x else x) (builtins.split re text)
    );

  # The non-empty pieces of `text` between matches of `re` (Python's re.split, empties
  # dropped).
  splitWords =
    re: text: builtins.filter (w: builtins.isString w && w != "") (builtins.split re text);

  /**
    A variant's plan.json data this code does not understand: one clear line naming the
    variant (the planner writes valid data; a hand-edited or newer plan.json may not).
  */
  fail =
    name: msg:
    throw "capplan: plan.json variant ${name}: ${msg} (regenerate overlays/plan.json with `capplan generate`)";

  /**
    Plan data this nixpkgs does not have (a scope, a package, a recipe argument): regenerating
    against the pinned nixpkgs is the fix.
  */
  failAgainst =
    name: msg:
    throw "capplan: plan.json variant ${name}: ${msg} (regenerate overlays/plan.json with `capplan generate` against this nixpkgs)";

  isStringList = v: builtins.isList v && builtins.all builtins.isString v;

  /**
    The package at a variant's `attr` in a package set: a missing attribute is a `throw` naming
    the path (catchable by tryEval, one clear line), not Nix's uncatchable "attribute 'onednn'
    missing".

    # Type

    ```
    select :: PackageSet -> Variant -> Derivation
    ```
  */
  select =
    set: variant:
    foldl' (
      scope: name:
      if builtins.isAttrs scope && scope ? ${name} then
        scope.${name}
      else
        throw "capplan: plan.json asks for ${builtins.concatStringsSep "." variant.attr}, which this nixpkgs does not have (regenerate overlays/plan.json with `capplan generate` against this nixpkgs, or drop the package)"
    ) set variant.attr;

  /**
    The overlay that puts a torch built for `gpuTargets` into every Python package set of an
    instance, so torchvision (which takes `torch` from its own set and has no `gpuTargets`,
    pkgs/development/python-modules/torchvision/default.nix) builds against that very torch.
    `pythonPackagesExtensions` is the top-level list every interpreter's package set applies
    (pkgs/development/interpreters/python/passthrufun.nix: `extensions = composeManyExtensions
    ([ hooks pythonExtension ] ++ pythonPackagesExtensions ++ [ overrides ])`).
  */
  gpuTargetsOverlay = gpuTargets: final: prev: {
    pythonPackagesExtensions = prev.pythonPackagesExtensions ++ [
      (pyFinal: pyPrev: {
        torch = pyPrev.torch.override { inherit gpuTargets; };
      })
    ];
  };

  /**
    Compiler flags added to one derivation's NIX_CFLAGS_COMPILE (a `cflags` CPU variant's),
    where the derivation keeps it: top level (as older recipes set it) or in `env` (as newer
    ones do); make-derivation.nix refuses the same name in both, so the flags go where the
    recipe has it, else into `env`.
  */
  addCflags =
    flags: old:
    let
      join = before: toString ((if before == "" then [ ] else [ before ]) ++ flags);
    in
    if old ? NIX_CFLAGS_COMPILE then
      { NIX_CFLAGS_COMPILE = join (toString old.NIX_CFLAGS_COMPILE); }
    else
      {
        env = (old.env or { }) // {
          NIX_CFLAGS_COMPILE = join (toString ((old.env or { }).NIX_CFLAGS_COMPILE or ""));
        };
      };
}
