"""The study's commands (`harness yaconv`, `harness yaconv-counters`), found by the CLI by convention."""
