# Reproduction workflow: one target per paper figure, aggregates per paper, `quick` and `all`.
#   snakemake --profile profiles/quick quick      # the whole catalogue, reduced (minutes on 2 cores)
#   snakemake --profile profiles/full all         # the papers' sizes and budgets
#   snakemake --profile profiles/slurm all        # the same on a SLURM cluster
#   snakemake -n ttile_fig5_6                     # dry run of one figure
# Every job is resumable: the harness skips candidates already in the result store.

configfile: "workflow/config.yaml"


def merge_catalogue(config, studies="studies"):
    """Add each study's figures, papers, jobs and job order to the base catalogue: its
    studies/<name>/catalogue.yaml."""
    import yaml
    from pathlib import Path

    for path in sorted(Path(studies).glob("*/catalogue.yaml")):
        part = yaml.safe_load(path.read_text()) or {}
        for key in ("figures", "papers"):
            for name, value in (part.get(key) or {}).items():
                if key == "papers":
                    config[key].setdefault(name, [])
                    config[key][name] += [v for v in value if v not in config[key][name]]
                elif name in config[key]:
                    raise ValueError(f"{path}: figure {name!r} is defined twice")
                else:
                    config[key][name] = value
        for name, first in (part.get("after") or {}).items():
            config.setdefault("after", {}).setdefault(name, []).extend(first)
        for profile, jobs in (part.get("jobs") or {}).items():
            clash = set(jobs) & set(config["jobs"].setdefault(profile, {}))
            if clash:
                raise ValueError(f"{path}: jobs {sorted(clash)} are defined twice in profile {profile}")
            config["jobs"][profile].update(jobs)


merge_catalogue(config)


onstart:
    # the slurm profile (or --executor slurm) with no scheduler to reach: one line, not a plugin traceback
    if getattr(workflow.executor_plugin, "name", "") == "slurm":
        from harness.allocation import scheduler_problem

        if problem := scheduler_problem():
            raise WorkflowError(problem)

PROFILE = config.get("profile", "quick")
JOBS = config["jobs"][PROFILE]
FIGURES = config["figures"]
PAPERS = config["papers"]
RESULTS = config.get("results", "results")
# the report's PDF (weasyprint, a minute on the quick report's 200+ pages): full and slurm profiles; the
# quick one ends at the HTML (`harness report --pdf` writes the PDF on demand)
PDF = bool(config.get("pdf", True))
HARNESS = config.get("harness", ".venv/bin/harness")
RUN_OVERRIDES = list(config.get("run_overrides", []))


def job_command(name):
    """The harness call of a job, with this workflow's results directory."""
    args = list(JOBS[name])
    # a profile's overrides of every `harness run` job (the quick profile waits less before a retime)
    where = [f"results_dir={RESULTS}", *RUN_OVERRIDES] if args[0] == "run" else ["--results", RESULTS]
    return " ".join([HARNESS] + [f"'{a}'" for a in args + where])


def needs_first(name):
    """The jobs of this profile that must finish before this one (the catalogue's ``after:``)."""
    return [j for j in config.get("after", {}).get(name, []) if j in JOBS]


def done(names):
    """The done-files of the jobs ``names`` that this profile runs (a figure may have full-only jobs, such
    as Fig 6.3's TVM tuning: the quick profile builds the figure without them)."""
    return [f"{RESULTS}/done/{n}.txt" for n in names if n in JOBS]


rule all:
    input:
        f"{RESULTS}/report/index.html",


rule quick:
    input:
        f"{RESULTS}/report/index.html",


for _figure, _jobs in FIGURES.items():
    rule:
        name:
            _figure
        input:
            done(_jobs),


for _paper, _figures in PAPERS.items():
    rule:
        name:
            _paper
        input:
            [done(FIGURES[f]) for f in _figures],


rule calibrate:
    output:
        f"{RESULTS}/done/calibrate.txt",
    shell:
        "{HARNESS} calibrate --results {RESULTS} > {output}.tmp && mv {output}.tmp {output}"


rule job:
    input:
        f"{RESULTS}/done/calibrate.txt",
        lambda wc: done(needs_first(wc.name)),
    output:
        f"{RESULTS}/done/{{name}}.txt",
    wildcard_constraints:
        name="|".join(JOBS),
    params:
        command=lambda wc: job_command(wc.name),
    # each job's wall time and memory (Snakemake's benchmark file): where a profile's minutes go
    benchmark:
        f"{RESULTS}/benchmarks/{{name}}.tsv"
    # one measurement at a time: timings must not share the machine with another measurement
    resources:
        machine=1,
    shell:
        "{params.command} > {output}.tmp && mv {output}.tmp {output}"


rule report:
    input:
        done(JOBS),
    output:
        f"{RESULTS}/report/index.html",
        f"{RESULTS}/report/provenance.html",
        [f"{RESULTS}/report/report.pdf"] if PDF else [],
    params:
        pdf="--pdf" if PDF else "",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    shell:
        "{HARNESS} report --results {RESULTS} --out {RESULTS}/report {params.pdf}"
