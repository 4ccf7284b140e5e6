"""Seed 003 (Georganas et al., PARLOOPER/TPP): loop-nest strings ("aBC") around a batch-reduce GEMM core,
ranked by a cache model and tuned by enumeration. See README.md here."""

#: candidate kinds this study renders (kind -> "module:function"; kernels.candidate.render finds them here)
RENDERERS = {"loop_string": "studies.loop_strings.kernels:render_loop_string"}
