"""Seed 002 (Alaejos et al., TOMS 2024): the BLIS-like GEMM family (which operand stays in which cache
level) as schemes, its cache-parameter model, and the comparison with the BLAS libraries. See README.md
here."""

#: space-entry expanders this study provides (key -> "module:function"; kernels.space finds them here)
EXPANDERS = {"gemm_variant": "studies.gemm_family.kernels:space_entry"}
