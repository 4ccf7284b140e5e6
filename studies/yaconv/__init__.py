"""Seed 001 (Korostelev, YaConv thesis ch. 5): convolution on GEMM packing and microkernels with a constant
buffer, against im2col + GEMM. See README.md here."""

#: candidate kinds this study renders (kind -> "module:function"; kernels.candidate.render finds them here)
RENDERERS = {"conv_algo": "studies.yaconv.kernels:render_conv_algo"}  # im2col + GEMM, YaConv, direct
