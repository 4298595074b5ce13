"""The CPU family: microarchitecture levels, the CPU knowledge base and planning."""
