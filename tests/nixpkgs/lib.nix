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

  # lib.customisation.makeOverridable, reduced to what callers of torch & co. use: `override`,
  # and `overrideAttrs` kept overridable (overrideResult: the result of `.overrideAttrs` still
  # has `.override`, with the attribute change applied again after it).
  makeOverridable =
    f: args:
    let
      result = f args;
      override =
        newArgs: makeOverridable f (args // (if builtins.isFunction newArgs then newArgs args else newArgs));
    in
    result
    // {
      inherit override;
    }
    // (
      if builtins.isAttrs result && result ? overrideAttrs then
        { overrideAttrs = fdrv: makeOverridable (a: (f a).overrideAttrs fdrv) args; }
      else
        { }
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
