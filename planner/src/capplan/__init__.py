"""capplan: plan CUDA capability-specific cache builds for nixpkgs."""

__all__ = ["__version__"]

__version__ = "0.1.0"
