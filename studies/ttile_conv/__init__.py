"""Seed 000 chapters 5-6, the convolution design-space exploration: random draws over microkernel plans and
tilings on the 23 layers, their distributions, expect(n, τ), best-of against oneDNN, the strategies and the
ablations. See README.md here."""
