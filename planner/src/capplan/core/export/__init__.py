"""Render one package's planned variants in other ecosystems' formats (issue 35): PEP 825
wheel variants, a conda-forge ``conda_build_config.yaml`` keyed on CEP 46's ``__cuda_arch``, and
a Spack environment. Pure: each renderer takes the Plan and returns the files' text."""

from capplan.core.export.common import Export, ExportFile, export_variants

__all__ = ["Export", "ExportFile", "export_variants"]
