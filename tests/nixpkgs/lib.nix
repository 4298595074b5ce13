# Follows NixOS/nixpkgs lib/trivial.nix (functionArgs, setFunctionArgs, mirrorFunctionArgs) and lib/customisation.nix (makeOverridable with mirrorArgs), current master as read through the code index in Nov 2026 (the index names no commit for that text; its pinned copies, lib/trivial.nix c3e03d1199ac2b3a9fb0c5367b5062d6b6e1eae0 and lib/customisation.nix 927c4f83d8d62b45229a931d9c295ad9a2d6d541, predate mirrorFunctionArgs).
# The few helpers the stand-in needs, written with builtins.  Names and argument orders follow
# real nixpkgs lib (lib/lists.nix, lib/strings.nix, lib/versions.nix) so the stand-in's code can
# be read side by side with the real files it imitates.  capplan's own Nix code never uses this.
let
  inherit (builtins)
    compareVersions
    concatStringsSep
    elem
    filter
    foldl'
    length
    elemAt
    replaceStrings
    ;
in
rec {
  inherit concatStringsSep elem filter foldl';

  # lib.lists.last
  last = list: elemAt list (length list - 1);

  # lib.lists.intersectLists e l: the elements of l that are in e, in l's order.
  intersectLists = e: filter (x: elem x e);

  # lib.lists.subtractLists e l: l without the elements of e.
  subtractLists = e: filter (x: !(elem x e));

  optional = cond: x: if cond then [ x ] else [ ];
  optionals = cond: xs: if cond then xs else [ ];
  optionalString = cond: s: if cond then s else "";

  # lib.strings.versionOlder / versionAtLeast
  versionOlder = a: b: compareVersions a b < 0;
  versionAtLeast = a: b: compareVersions a b >= 0;

  # lib.versions.major for "12.9" -> "12"
  versionMajor = v: builtins.head (builtins.splitVersion v);

  # lib.asserts.assertMsg
  assertMsg = pred: msg: pred || builtins.throw msg;

  # lib.trivial.throwIf
  throwIf = cond: msg: if cond then throw msg else x: x;

  # _cuda.lib.dropDots (pkgs/development/cuda-modules/_cuda/lib/utils.nix)
  dropDots = replaceStrings [ "." ] [ "" ];

  # _cuda.lib.mkVersionedName "cudaPackages" "12.9" -> "cudaPackages_12_9"
  mkVersionedName = name: version: "${name}_${replaceStrings [ "." ] [ "_" ] version}";

  # _cuda.lib._mkFailedAssertionsString (pkgs/development/cuda-modules/_cuda/lib/assertions.nix)
  mkFailedAssertionsString = foldl' (
    acc:
    { assertion, message }:
    acc + optionalString (!assertion) ("\n- " + message)
  ) "";

  # lib/trivial.nix: a function with its arguments set by hand is a functor,
  # `{ __functor = self: f; __functionArgs = args; }`; lib.functionArgs reads it, while plain
  # builtins.functionArgs throws on it ("value is a set while a lambda was expected").
  isFunction = f: builtins.isFunction f || (f ? __functor && isFunction (f.__functor f));
  setFunctionArgs = f: args: {
    __functor = self: f;
    __functionArgs = args;
  };
  functionArgs =
    f: if f ? __functor then f.__functionArgs or (functionArgs (f.__functor f)) else builtins.functionArgs f;
  mirrorFunctionArgs =
    f:
    let
      fArgs = functionArgs f;
    in
    g: setFunctionArgs g fArgs;

  # lib/customisation.nix makeOverridable, as current nixpkgs writes it: the result and its
  # `override` are functors carrying the recipe's arguments (mirrorFunctionArgs), so
  # `lib.functionArgs pkg.override` lists them; `overrideAttrs` keeps the result overridable
  # (overrideResult). overrideDerivation is left out (capplan never uses it).
  makeOverridable =
    f:
    let
      mirrorArgs = mirrorFunctionArgs f;
    in
    mirrorArgs (
      origArgs:
      let
        result = f origArgs;
        overrideWith = newArgs: origArgs // (if isFunction newArgs then newArgs origArgs else newArgs);
        overrideArgs = mirrorArgs (newArgs: makeOverridable f (overrideWith newArgs));
        overrideResult = g: makeOverridable (mirrorArgs (args: g (f args))) origArgs;
      in
      if builtins.isAttrs result then
        result
        // {
          override = overrideArgs;
          ${if result ? overrideAttrs then "overrideAttrs" else null} =
            fdrv: overrideResult (x: x.overrideAttrs fdrv);
        }
      else if isFunction result then
        setFunctionArgs result (functionArgs result) // { override = overrideArgs; }
      else
        result
    );

  # lib.fixedPoints
  fix = f: let x = f x; in x;
  extends =
    overlay: f: final:
    let
      prev = f final;
    in
    prev // overlay final prev;

  genAttrs = names: f: builtins.listToAttrs (map (name: { inherit name; value = f name; }) names);
}
