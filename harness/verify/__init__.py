"""Tools that test the measuring code itself, kept apart from it: the mutant catalogue the semantic check
must catch (:mod:`harness.verify.mutants`) and the scheme fuzzer (:mod:`harness.verify.fuzz`). Nothing in
the measuring pipeline imports them (tests/test_layout.py checks it); they run as tests and as benchmark
commands (``python -m harness.verify.mutants``, ``python -m harness.verify.fuzz --n 10000``)."""
