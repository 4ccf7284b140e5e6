# The two commands of the README: `make quick` (set up everything, run the quick reproduction) and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# --compile-bytecode: as pip does. Without it, where PYTHONDONTWRITEBYTECODE is set (as on our VMs) every
# process compiled its imports again: a `harness` start took 5-6 s instead of 2.4, make quick 13:42.
UV := $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)
APT_PACKAGES := gcc clang libopenblas-dev libpapi-dev libblis-dev libxsmm-dev libdnnl-dev chromium poppler-utils valgrind
JOBS ?= 2

.PHONY: setup quick full test test-heavy lint clean-results restore-measured report-all torch tvm slurm-up slurm-down slurm-test

# Idempotent: Debian packages when run as root, a virtual environment, the project (editable) with its
# dev tools, today's baseline libraries from PyPI at pinned versions (oneDNN 3, OpenBLAS, MKL: extra
# "baselines"). Apache TVM (the optional TVM convolution baseline, 300 MB, used only by the full profile
# and its tests) is `make tvm`, as PyTorch is `make torch`: make quick does not wait for either.
setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(APT_PACKAGES)); missing baselines are reported as unavailable"; fi
	test -x $(PY) || python3 -m venv $(VENV)
	@# uv (Astral's installer) resolves and installs the same versions as pip (pip freeze compared) in 31 s
	@# where pip took 79 s with a warm cache (2-vCPU Zen 3): most of a minute of every first `make quick`.
	@# pip does it when uv cannot (an index only pip is configured for: uv reads no pip.conf).
	@# One resolution and one editable build with both extras (two installs built the project twice).
	$(PIP) install -q uv && $(UV) -e '.[dev,baselines]' || \
	$(PIP) install -q -e '.[dev,baselines]' || { \
	  echo "today's libraries (oneDNN 3, OpenBLAS, MKL) not installable here: reported as unavailable"; \
	  $(PIP) install -q -e '.[dev]'; }
	touch $@

# PyTorch as a further baseline (about 700 MB): `make torch`, then the spaces' torch baselines run
# (pip, not uv: a CPU-only wheel comes from the index or wheel folder the user's pip.conf names, which uv ignores)
torch: setup
	$(PIP) install -q -e '.[torch]'

# Apache TVM (the full profile's TVM bars and auto-tuner curve, tests/test_tvm.py): `make tvm`
tvm: setup
	$(UV) -e '.[tvm]' || $(PIP) install -q -e '.[tvm]' || echo "TVM not installable here: the tvm baseline will be reported as unavailable"

# The quick reproduction: a handful of matmul and conv schemes plus library baselines, then the report.
quick: setup
	@echo "make quick: 36 harness jobs, one or more per figure of the five papers at reduced sizes (Snakemake,"
	@echo "one measurement at a time), then the HTML report: 4 to 13 minutes after setup on 2 vCPUs by CPU"
	@echo "and host load (docs/timings.md); each job's time lands in results/benchmarks/. Full sizes: make full."
	$(VENV)/bin/snakemake --profile profiles/quick quick
	@echo "report: $$(pwd)/results/report/index.html"

full: setup tvm
	$(VENV)/bin/snakemake --profile profiles/full all

test: setup
	$(VENV)/bin/pytest

# the tests kept out of `make test` for time (CI runs them too)
test-heavy: setup
	$(VENV)/bin/pytest -m heavy

lint: setup
	$(VENV)/bin/ruff check harness kernels reports studies tests
	$(VENV)/bin/ruff format --check harness kernels reports studies tests

clean-results:
	rm -rf results/rows results/report results/done

# The measurements behind the session notes (reports/measured/*.tar.xz, each a results directory's rows and
# simulations, written by `harness archive pack`) restored into RESULTS, so `harness report --results
# $(RESULTS)` rebuilds their figures and a sweep run there resumes them instead of starting over.
RESULTS ?= results
restore-measured: $(VENV)/.setup-done
	$(VENV)/bin/harness archive unpack reports/measured/*.tar.xz --results $(RESULTS)

# One report of every archive (results-all/report/index.html): a verdict per paper figure and machine (the
# verdict matrix at its top), each experiment's figure per machine. The archives are unpacked again only
# when one of them changed (read and checked in 2 processes): on the 2-vCPU Zen 3, 113 archives, 25 s of
# unpacking and 2 min 34 s of report (docs/report.md, "Keeping it fast").
ARCHIVES := $(wildcard reports/measured/*.tar.xz)
results-all/.restored: $(ARCHIVES) | $(VENV)/.setup-done
	rm -rf results-all
	$(VENV)/bin/harness archive unpack $(ARCHIVES) --results results-all
	touch $@

# under the memory sampler (harness/peak_memory.py): wall time and peak summed PSS, issue 35's bounds
# (3 min, 2 GB), printed and appended to results-all/report-peaks.tsv
report-all: results-all/.restored
	$(VENV)/bin/python -m harness.peak_memory --out results-all/report-peaks.tsv --label report-all -- \
		$(VENV)/bin/harness report --results results-all --out results-all/report
	@echo "report of every archive: $$(pwd)/results-all/report/index.html"
	@echo "verdict matrix: $$(pwd)/results-all/report/figures/verdict-matrix.png"

# A single-node SLURM cluster on this machine (root, Debian 12: slurm-wlm 22.05, munge, slurmdbd with
# MariaDB; daemons started directly, no systemd needed), and the cluster paths run through it: the slurm
# profile and the submitit launcher against local runs of the same targets (docs/cluster.md).
slurm-up:
	bash profiles/slurm/local/cluster.sh up

slurm-down:
	bash profiles/slurm/local/cluster.sh down

slurm-test: setup slurm-up
	$(VENV)/bin/pytest -m slurm -n 0 -s tests/test_slurm.py
