# The machine side: plan.json plus one machine's GPUs (names, capabilities, gfx targets, CPU
# levels, or a nixos-facter report) give an overlay that puts each planned package's variant
# for those GPUs into the machine's own package set, and nothing else. Three entry points share
# it: the NixOS module and the home-manager module (./module.nix) and `lib.overlayFor`
# (./fleet.nix). The variants are the fleet's own `legacyPackages.<system>.<variant>`, so the
# store path a machine gets is the path the build matrix fills: the cache serves it by
# construction. Which variants run on a target is data `capplan generate` wrote (plan.json
# `machine`: the rule `capplan detect` picks with); how a target is found (a capplan.gpus
# entry, a PCI id in a facter report) is each family file's (`machine` in
# ./families/<family>.nix); nothing here names a vendor. builtins only.
let
  families = import ./families;
  input = import ./machine-input.nix;
  inherit (input) toLower exactKey readReport;
  inherit (builtins)
    all
    any
    attrNames
    concatLists
    concatMap
    concatStringsSep
    elem
    elemAt
    filter
    foldl'
    genList
    head
    isAttrs
    isList
    isString
    length
    listToAttrs
    stringLength
    substring
    toJSON
    ;

  # The GPU families in the registry's order (./families/default.nix), by their name in
  # plan.json's `machine.families`.
  ordered = filter (f: f ? machine) families.all;

  quote = text: toJSON text;

  listed =
    xs:
    if length xs == 1 then
      head xs
    else
      concatStringsSep ", " (genList (elemAt xs) (length xs - 1)) + " and ${elemAt xs (length xs - 1)}";

  unique = foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];

  /**
    What one machine gets from a plan: its targets, per planned package the variant serving
    all of them, the errors (one `capplan:` line each) and warnings, and the overlay.

    # Inputs

    `plan`: the decoded plan.json; `variants`: the fleet's variants of `system` by name (its
    `legacyPackages.<system>`); `gpus`: capplan.gpus; `facterReport`: null, a path or the decoded
    report; `onUnserved`: "error" or "default".
  */
  resolve =
    {
      plan,
      system,
      gpus ? [ ],
      facterReport ? null,
      onUnserved ? "error",
    }:
    let
      section = plan.machine or null;
      sectionOf = f: if section == null then { } else section.families.${f.name} or { };
      gpusOk = isList gpus && all isString gpus;
      report = readReport facterReport;

      # One capplan.gpus entry: the first family whose `machine.target` claims it, else the
      # names table's own refusal (an ambiguous name), else unknown.
      fromEntry =
        text:
        let
          key = exactKey text;
          claims = filter (c: c.found != null) (
            map (f: {
              family = f;
              found = f.machine.target {
                inherit text key system;
                lower = toLower text;
                names = section.names or { };
                section = sectionOf f;
              };
            }) ordered
          );
          refusal = (section.names or { }).${key}.error or null;
          # Not an exact name: each family's loose match, in the order the CLI asks them
          # (`machine.loose`: null, { target; name; } or { error; }).
          looseAnswers = filter (a: a.found != null) (
            map (f: {
              family = f;
              found = (f.machine.loose or (_: null)) {
                inherit text;
                shown = input.echo text;
                section = sectionOf f;
              };
            }) ordered
          );
          looseHit = head looseAnswers;
          # What the CLI refuses before any lookup (core/model/devices.py check_device_text).
          textError = input.deviceTextError text;
          refuse = why: { error = "capplan: capplan.gpus entry ${quote text}: ${why}"; };
          found = family: answer: {
            inherit family;
            inherit (answer) target name;
            # As the user wrote it: the lines name it so, and a fat group lists it so.
            label = text;
            entry = text;
          };
        in
        if textError != null then
          refuse textError
        else if claims != [ ] then
          found (head claims).family (head claims).found
        else if refusal != null then
          refuse refusal
        else if looseAnswers != [ ] then
          (if looseHit.found ? error then refuse looseHit.found.error else found looseHit.family looseHit.found)
        else
          {
            error = "capplan: capplan.gpus entry ${quote text} is no GPU, capability, gfx target or CPU level this plan knows (give a name as `capplan gpus` prints it, an alias, a capability such as \"8.6\" or a gfx target such as \"gfx1100\"; `capplan gpus ${quote text}` lists the candidates)";
          };

      # One facter GPU: the family whose PCI vendor it is; GPUs of a vendor no family builds
      # for (an Intel iGPU) are not compute targets here.
      fromPci =
        gpu:
        let
          owners = filter (f: f.machine.pciVendor == gpu.vendor) ordered;
          f = head owners;
          found = f.machine.fromPci (sectionOf f) gpu;
        in
        if owners == [ ] then
          null
        else if found ? error then
          { inherit (found) error; family = f; }
        else
          {
            family = f;
            inherit (found) target name;
            label = "${gpu.model} [${gpu.vendor}:${gpu.device}]";
            # A PCI id is no fleet entry; its target is.
            entry = found.target;
          };

      entries = if gpusOk then map fromEntry gpus else [ ];
      pcis = filter (x: x != null) (map fromPci report.gpus);
      # A facter GPU capplan's tables cannot name is an error unless capplan.gpus names a GPU
      # of its family (the user has said what it is).
      named = f: any (e: !(e ? error) && e.family.name == f.name) entries;
      pciErrors = map (x: x.error) (filter (x: x ? error && !(named x.family)) pcis);
      targets = filter (x: !(x ? error)) (entries ++ pcis);

      sectionErrors =
        if section == null then
          [ "capplan: this plan.json has no machine section (written before capplan could serve machines): regenerate it with `capplan generate`" ]
        else if (section.version or null) != 1 then
          [ "capplan: plan.json's machine section has version ${toJSON (section.version or null)}, this module reads version 1; regenerate it with `capplan generate`" ]
        else
          [ ];
      inputErrors =
        (
          if gpusOk then
            [ ]
          else
            [ "capplan: capplan.gpus must be a list of strings (GPU names, capabilities, gfx targets or CPU levels), got ${builtins.typeOf gpus} ${toJSON gpus}" ]
        )
        ++ (
          if
            elem onUnserved [
              "error"
              "default"
            ]
          then
            [ ]
          else
            [ "capplan: capplan.onUnserved must be \"error\" or \"default\", got ${toJSON onUnserved}" ]
        )
        ++ report.errors
        ++ map (e: e.error) (filter (e: e ? error) entries)
        ++ pciErrors;

      # Per family with targets here: per package it plans on this system, the variant that
      # runs on every one of its targets (the first of the first target's list, best first, that
      # every other target's list holds), or why none does.
      familyAnswers =
        f:
        let
          mine = filter (t: t.family.name == f.name) targets;
          ts = unique (map (t: t.target) mine);
          labelOf =
            t:
            let
              hit = head (filter (x: x.target == t) mine);
            in
            if hit.label == t then t else "${hit.label} (${t})";
          data = sectionOf f;
          packages = data.packages.${system} or [ ];
          runs = t: data.targets.${system}.${t} or { };
          answer =
            package:
            let
              lists = map (t: (runs t).${package} or [ ]) ts;
              common = filter (v: all (l: elem v l) lists) (head lists);
              unserved = filter (t: ((runs t).${package} or [ ]) == [ ]) ts;
            in
            if common != [ ] then
              { variant = head common; }
            else if unserved != [ ] then
              {
                # Grouped with the other packages of the same GPUs: one line per cause.
                cause = "runs on ${listed (map labelOf unserved)} (${system})";
                fix = "add ${if length unserved == 1 then "it" else "them"} to [fleet] gpus in capplan.toml and run `capplan generate`";
              }
            else
              {
                cause = "serves all of ${listed (map labelOf ts)} together";
                fix = "plan one with [policy] fat = { group = [ ${concatStringsSep ", " (map (t: quote (head (filter (x: x.target == t) mine)).entry) ts)} ] } in capplan.toml and run `capplan generate`";
              };
        in
        if ts == [ ] then
          [ ]
        else
          map (package: { inherit package; family = f.name; } // answer package) packages;

      answers = concatMap familyAnswers ordered;
      # A machine of a system the plan builds nothing for: every GPU unserved, said once.
      planSystems = plan.systems or [ (plan.system or system) ];
      systemLines =
        if system == "" || targets == [ ] || elem system planSystems then
          [ ]
        else
          [
            "capplan: this plan builds nothing for ${system} (it plans ${concatStringsSep " and " planSystems}): add \"${system}\" to [policy] systems in capplan.toml and run `capplan generate`, or set capplan.onUnserved = \"default\" to keep nixpkgs' packages"
          ];
      byPackage = builtins.groupBy (a: a.package) answers;
      # A package two families serve here (an NVIDIA and an AMD GPU in one machine): one
      # package set holds one torch.
      clashes = filter (p: length (filter (a: a ? variant) byPackage.${p}) > 1) (attrNames byPackage);
      clashErrors = map (
        p:
        "capplan: ${p} is planned for more than one kind of GPU in this machine (${
          listed (map (a: a.family) byPackage.${p})
        }): list only the GPUs one package set serves in capplan.gpus"
      ) clashes;
      unservedAnswers = filter (a: a ? cause) answers;
      causes = builtins.groupBy (a: a.cause) unservedAnswers;
      unservedLines = map (
        cause:
        let
          group = causes.${cause};
          packages = map (a: a.package) group;
          these = listed packages;
        in
        "capplan: no variant of ${these} in this plan ${cause}: ${(head group).fix}, or set capplan.onUnserved = \"default\" to keep nixpkgs' ${these}"
      ) (attrNames causes);
      picks = listToAttrs (
        map (a: {
          name = a.package;
          value = a.variant;
        }) (filter (a: a ? variant) answers)
      );
      errors =
        sectionErrors
        ++ (
          if sectionErrors != [ ] then
            [ ]
          else
            inputErrors
            ++ clashErrors
            ++ (if onUnserved == "default" then [ ] else systemLines ++ unservedLines)
        );
    in
    {
      inherit errors picks;
      warnings =
        (
          if onUnserved == "default" && sectionErrors == [ ] then
            map (l: l + " (capplan.onUnserved = \"default\": nixpkgs' own package is kept)") (
              systemLines ++ unservedLines
            )
          else
            [ ]
        )
        ++ (
          if targets == [ ] && errors == [ ] then
            [
              "capplan: no GPU is named (capplan.gpus is empty and no facter report names one): nothing changes in this package set"
            ]
          else
            [ ]
        );
      targets = map (t: {
        family = t.family.name;
        inherit (t) target name label;
      }) targets;
      reportSystem = report.system;
    };

  /**
    plan.json's `cache` as nix.conf settings: the fleet's substituters and the keys they sign
    with.
  */
  cacheSettings =
    plan:
    let
      cache = plan.cache or { };
    in
    {
      substituters = cache.substituters or [ ];
      publicKeys = cache.public_keys or [ ];
    };
in
{
  inherit (input) exactKey readReport toHex4;
  inherit resolve cacheSettings;
  overlay = import ./machine-overlay.nix { inherit resolve; };
}
