# Your fleet's GPU builds: capplan plans them from capplan.toml into overlays/plan.json
# (`capplan generate`), and this flake builds that plan (`nix build .#torch-sm86`).
{
  description = "A GPU fleet's CUDA variants, planned by capplan";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
  inputs.capplan.url = "github:OWNER/capplan";
  # One nixpkgs for the variants and for the capplan tool: yours.
  inputs.capplan.inputs.nixpkgs.follows = "nixpkgs";

  outputs =
    {
      self,
      nixpkgs,
      capplan,
    }:
    # legacyPackages (the variants: torch-sm86, ...), overlays.default, hydraJobs, checks, and
    # the capplan tool (packages/apps capplan), which the CI workflow runs as `nix run .#capplan`.
    # Your machines use the cache through three outputs (docs/machines.md):
    #   nixosModules.default          NixOS: capplan.enable = true; capplan.gpus = [ "RTX 3090" ];
    #   homeModules.default           home-manager (also homeManagerModules.default): the same
    #   lib.overlayFor { gpus = [ "8.6" ]; }   a plain `import nixpkgs { overlays = [ ... ]; }`
    capplan.lib.mkFleetFlake {
      inherit nixpkgs self;
      plan = ./overlays/plan.json;
    };
}
