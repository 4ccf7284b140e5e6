"""The study's commands (`harness h2h`), found by the CLI by convention."""
