"""The study's command (`harness compiler-study`), found by the CLI by convention."""
