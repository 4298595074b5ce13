# What a machine says about itself, read for ./machine.nix: GPU spellings by their exact key
# (the key of plan.json's `machine.names`) and nixos-facter reports (their PCI ids). builtins
# only; the words an exact key drops come from the family files (`machine.keyDrops`).
let
  families = import ./families;
  inherit (builtins)
    any
    concatLists
    concatStringsSep
    elem
    elemAt
    filter
    foldl'
    genList
    isAttrs
    isList
    isString
    map
    ;
  dropped = concatLists (map (f: f.machine.keyDrops or [ ]) (filter (f: f ? machine) families.all));

  upper = [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ];
  lower = [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ];
  toLower = builtins.replaceStrings upper lower;

  /**
    The exact key of a GPU spelling, as capplan's CLI computes it
    (core/families/cuda/gpus.py `exact_key`): lower case, split at anything but letters,
    digits, dots and parentheses, the families' `keyDrops` words dropped (a vendor's name), the
    rest joined: "RTX 3090", "rtx3090" and "NVIDIA RTX-3090" are one key. plan.json's
    `machine.names` is keyed by it.
  */
  exactKey =
    text:
    concatStringsSep "" (
      filter (w: isString w && w != "" && !(elem w dropped)) (
        builtins.split "[^a-z0-9.()]+" (toLower text)
      )
    );

  hexDigits = [ "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "a" "b" "c" "d" "e" "f" ];
  # A 16-bit number as four lower-case hex digits (facter writes ids as { hex; value; }).
  toHex4 =
    n:
    concatStringsSep "" (
      genList (
        i:
        let
          shift = foldl' (acc: _: acc * 16) 1 (genList (x: x) (3 - i));
        in
        elemAt hexDigits (builtins.bitAnd (n / shift) 15)
      ) 4
    );

  /**
    A PCI id of a nixos-facter report entry (`vendor` or `device`): nixos-facter writes
    `{ hex = "10de"; name = "..."; value = 4318; }` (pkg/hwinfo/id.go, `idJSON`: hex is
    "%04x" of value, name optional); null when it is neither.
  */
  pciId =
    id:
    if isAttrs id && isString (id.hex or null) && builtins.match "[0-9a-fA-F]{4}" id.hex != null then
      toLower id.hex
    else if isAttrs id && builtins.isInt (id.value or null) && id.value >= 0 && id.value < 65536 then
      toHex4 id.value
    else
      null;

  facterHelp = "a nixos-facter report.json (hardware.graphics_card: a list of { vendor = { hex; value; }; device = { hex; value; }; })";

  /**
    The GPUs of a nixos-facter report (the decoded JSON, as nixos-facter-modules' and
    nixpkgs' `hardware.facter.report` hold it, or a path to report.json), as
    `{ gpus = [ { vendor; device; model; } ]; errors = [ line ]; system; }`.
  */
  readReport =
    report:
    let
      decoded =
        if report == null then
          { }
        else if isAttrs report then
          report
        else if builtins.isPath report || isString report then
          (
            if builtins.pathExists report then
              builtins.fromJSON (builtins.readFile report)
            else
              null
          )
        else
          null;
      hardware = decoded.hardware or { };
      cards = hardware.graphics_card or [ ];
      entry =
        card:
        let
          maker = pciId (card.vendor or null);
          product = pciId (card.device or null);
        in
        if !(isAttrs card) || maker == null || product == null then
          null
        else
          {
            # The PCI vendor and device ids, four lower-case hex digits each.
            vendor = maker;
            device = product;
            model = if isString (card.model or null) then card.model else "${maker}:${product}";
          };
      entries = if isList cards then map entry cards else [ ];
      fail = msg: {
        gpus = [ ];
        errors = [ "capplan: capplan.facterReport: ${msg} (expected ${facterHelp})" ];
        system = null;
      };
    in
    if report == null then
      {
        gpus = [ ];
        errors = [ ];
        system = null;
      }
    else if decoded == null && !(isAttrs report) && !(builtins.pathExists report) then
      fail "${toString report} does not exist"
    else if !(isAttrs decoded) then
      fail "the report is ${builtins.typeOf decoded}, not an object"
    else if !(isAttrs hardware) then
      fail "hardware is ${builtins.typeOf hardware}, not an object"
    else if !(isList cards) then
      fail "hardware.graphics_card is ${builtins.typeOf cards}, not a list"
    else if any (e: e == null) entries then
      fail "a hardware.graphics_card entry has no PCI vendor and device id"
    else
      {
        gpus = entries;
        errors = [ ];
        system = if isString (decoded.system or null) then decoded.system else null;
      };

  /**
    A value as a `capplan:` line echoes it (capplan/errors.py `shorten`): blanks around it
    dropped, control characters escaped (JSON's escapes), cut at 200 characters.
  */
  echo =
    text:
    let
      stripped = builtins.head (builtins.match "[[:space:]]*(.*[^[:space:]]|)[[:space:]]*" text);
      json = builtins.toJSON stripped;
      inner = builtins.substring 1 (builtins.stringLength json - 2) json;
    in
    if builtins.stringLength inner > 200 then builtins.substring 0 200 inner + "..." else inner;

  /**
    Why a capplan.gpus entry cannot name one device, as the CLI refuses it before any lookup
    (core/model/devices.py check_device_text): longer than a GPU name, a list, starting with
    "-", or a word or group of words repeated; null when it can.
  */
  deviceTextError =
    text:
    let
      stripped = builtins.head (builtins.match "[[:space:]]*(.*[^[:space:]]|)[[:space:]]*" text);
      words = filter (w: isString w && w != "") (builtins.split "[[:space:],;]+" (toLower stripped));
      n = builtins.length words;
      repeatsBlock =
        size:
        builtins.genList (i: elemAt words (i - (i / size) * size)) n == words;
      blocks = filter (size: n - (n / size) * size == 0 && repeatsBlock size) (
        builtins.genList (i: i + 1) (n / 2)
      );
      pairs = filter (i: elemAt words i == elemAt words (i + 1)) (
        builtins.genList (i: i) (if n > 0 then n - 1 else 0)
      );
      size = builtins.head blocks;
      block = concatStringsSep " " (builtins.genList (elemAt words) size);
      shown = echo text;
    in
    if builtins.stringLength stripped > 128 then
      "device '${shown}' is ${toString (builtins.stringLength stripped)} characters long, more than a GPU name (128 at most)"
    else if builtins.match ".*[,;].*" stripped != null then
      "device '${shown}' is a list, not one device (give each GPU as its own entry)"
    else if builtins.match "-.*" stripped != null then
      "device '${shown}' is no GPU name or capability (it starts with '-')"
    else if blocks != [ ] then
      "device '${shown}' repeats '${echo block}' ${toString (n / size)} times: it names one device once"
    else if pairs != [ ] then
      "device '${shown}' repeats '${echo (elemAt words (builtins.head pairs))}': it names one device once"
    else
      null;
in
{
  inherit
    deviceTextError
    echo
    toLower
    exactKey
    toHex4
    pciId
    readReport
    ;
}
