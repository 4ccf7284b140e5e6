"""The study's command (`harness loop-strings`), found by the CLI by convention."""
