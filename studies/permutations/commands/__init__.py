"""The study's commands (`harness permutations`), found by the CLI by convention."""
