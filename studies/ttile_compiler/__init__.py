"""Seed 000 §4.3, compiler impact: gcc/clang x -O2/-O3 x FMA emission x hoisting on the microkernels this
machine selected. See README.md here."""
