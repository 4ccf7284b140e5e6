"""The studies: one folder per paper (its kernels, command, figures, claims and catalogue), found by
the core by convention (harness.studies); the core never imports a study by name."""
