# The overlay of one machine (./machine.nix `resolve` says which variants): each variant put
# where the plan's `attr` names it in the machine's own package set. builtins only.
{ resolve }:
let
  inherit (builtins)
    attrNames
    concatMap
    concatStringsSep
    elemAt
    filter
    foldl'
    head
    length
    listToAttrs
    ;
  unique = foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ];
  /**
    The overlay of one machine: each picked variant put where the plan's `attr` names it in
    the machine's own package set: a Python package through `pythonPackagesExtensions` (so
    its dependants in every Python set that has it are built against it), a package in another
    scope through that scope's `overrideScope`, a top-level one as itself. Errors throw their
    first line when the set is evaluated (the modules also report them as assertions).
  */
  overlay =
    {
      plan,
      variantsFor,
      gpus ? [ ],
      facterReport ? null,
      onUnserved ? "error",
    }:
    final: prev:
    let
      system = prev.stdenv.hostPlatform.system;
      answer = resolve {
        inherit
          plan
          system
          gpus
          facterReport
          onUnserved
          ;
      };
      variants = variantsFor system;
      chosen = map (package: {
        inherit package;
        name = answer.picks.${package};
        attr = plan.variants.${answer.picks.${package}}.attr;
      }) (attrNames answer.picks);
      drv = c: variants.${c.name};
      isPython = c: length c.attr == 2 && builtins.match "python[0-9]*Packages" (head c.attr) != null;
      python = filter isPython chosen;
      scoped = filter (c: length c.attr == 2 && !(isPython c)) chosen;
      top = filter (c: length c.attr == 1) chosen;
      deeper = filter (c: length c.attr > 2) chosen;
      scopes = unique (map (c: head c.attr) scoped);
      inScope =
        scope:
        let
          members = listToAttrs (
            map (c: {
              name = elemAt c.attr 1;
              value = drv c;
            }) (filter (c: head c.attr == scope) scoped)
          );
        in
        if prev ? ${scope} && prev.${scope} ? overrideScope then
          prev.${scope}.overrideScope (_: _: members)
        else
          (prev.${scope} or { }) // members;
      # The variant is its own Python's package: only a set of that Python version takes it.
      sameVersion =
        pyPrev: d:
        (pyPrev.python.pythonVersion or null) == (d.pythonModule.pythonVersion or null);
      warned = foldl' (ok: w: builtins.trace "warning: ${w}" ok) true answer.warnings;
    in
    # Any wrong value stops the whole set with its line (the modules report it first, as an
    # assertion): a machine whose GPUs are not what capplan.gpus says gets nothing silently.
    if answer.errors != [ ] then
      throw (head answer.errors)
    else
      builtins.seq warned (
    (
      if deeper != [ ] then
        throw "capplan: plan.json variant ${(head deeper).name} has attr ${concatStringsSep "." (head deeper).attr}, deeper than this overlay places packages (report this to capplan)"
      else
        { }
    )
    // listToAttrs (
      map (c: {
        name = head c.attr;
        value = drv c;
      }) top
    )
    // listToAttrs (
      map (scope: {
        name = scope;
        value = inScope scope;
      }) scopes
    )
    // (
      if python == [ ] then
        { }
      else
        {
          pythonPackagesExtensions = prev.pythonPackagesExtensions ++ [
            (
              pyFinal: pyPrev:
              listToAttrs (
                concatMap (
                  c:
                  let
                    d = drv c;
                    attr = elemAt c.attr 1;
                  in
                  if pyPrev ? ${attr} && sameVersion pyPrev d then
                    [
                      {
                        name = attr;
                        value = d;
                      }
                    ]
                  else
                    [ ]
                ) python
              )
            )
          ];
        }
    ));

in
overlay
