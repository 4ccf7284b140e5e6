"""Seed 000 chapters 4-5, microkernels: hoisting the accumulators (§4.3), the isolated conv microkernels
and their selection (Fig 5.2, §5.2), combined and partial microkernels on a small matmul (Fig 5.6). See
README.md here."""
