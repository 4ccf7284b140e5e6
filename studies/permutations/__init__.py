"""Seed 004 (Papaphilippou et al.): the 720 orders of the convolution loop nest, simulated on a cache
hierarchy and timed. See README.md here."""
