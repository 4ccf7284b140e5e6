# Reproduction workflow: one rule per experiment, resumable (finished candidates are skipped by the
# harness itself), and a report built from everything measured so far.
#   snakemake -c2 quick        # the quick reproduction (minutes on 2 cores)
#   snakemake -c2 -n all       # dry run of everything
configfile: "workflow/config.yaml"

PROFILE = config.get("profile", "quick")
EXPERIMENTS = config["experiments"][PROFILE]  # name -> Hydra overrides
RESULTS = config.get("results", "results")
HARNESS = config.get("harness", ".venv/bin/harness")


rule all:
    input:
        f"{RESULTS}/report/index.html",


rule quick:
    input:
        f"{RESULTS}/report/index.html",


rule calibrate:
    output:
        f"{RESULTS}/done/calibrate.txt",
    shell:
        "{HARNESS} calibrate --results {RESULTS} > {output}.tmp && mv {output}.tmp {output}"


rule experiment:
    input:
        f"{RESULTS}/done/calibrate.txt",
    output:
        f"{RESULTS}/done/{{name}}.txt",
    params:
        overrides=lambda wc: " ".join(EXPERIMENTS[wc.name]),
    # one experiment at a time: timings must not share the machine with another measurement
    resources:
        machine=1,
    shell:
        "{HARNESS} run {params.overrides} results_dir={RESULTS} > {output}.tmp && mv {output}.tmp {output}"


rule report:
    input:
        expand(f"{RESULTS}/done/{{name}}.txt", name=EXPERIMENTS),
    output:
        f"{RESULTS}/report/index.html",
    shell:
        "{HARNESS} report --results {RESULTS} --out {RESULTS}/report"
