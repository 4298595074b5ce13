"""The ROCm family: gfx processors, the AMD knowledge base, planning, picker and verification."""
