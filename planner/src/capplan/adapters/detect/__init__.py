"""What this machine has: one module per target family (``nvidia``, ``amd``, ``cpu``), the
machine's Nix system and Jetson device tree (``system``), and the bounded tool runner they share
(``tools``)."""
