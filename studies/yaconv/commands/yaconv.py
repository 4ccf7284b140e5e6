"""YaConv vs im2col + GEMM (seed 001, ch. 5): per-layer GFLOPS on the torchvision layers, Fig 5.4/5.6 grids.

``harness yaconv [--set layers|seed000|fig5_4|fig5_6] [--quick] [--limit N] [--mode hot|cold|fresh]
[--rounds N] [--results DIR]`` measures, per layer, YaConv with BLIS's microkernel and with ours
(6x16, and the shape ``choose_shape`` picks for the layer), and im2col + BLIS sgemm (the paper's baseline),
through the standard pipeline (check before timing, one row per candidate). Strided layers (seed 000's
``*`` layers) give a YaConv row with status ``unsupported`` and reason "not applicable", and an im2col row.
Layers come from ``conf/workload/yaconv_layers.csv`` (the thesis's 73 unique geometries out of 218 layers)
and ``conf/workload/ttile_layers.csv`` (seed 000's 23 layers, filters > 1); cachegrind counts are
``harness yaconv-counters``. At the end it prints the headline of the experiment's stored rows on this
machine (``studies/yaconv/headline.py``): best YaConv / best im2col per layer, geomean, rounds, losers.

Batch: the thesis times a batch of N = 1e9 / flops images (run.sh; about one image for the large layers),
each run a new process whose buffers are allocated inside the timed batch. The default hot mode times
one image per call, repeated until the 95% CI of the mean is within 2%, so im2col's patch matrix stays
resident and faulted-in between calls. ``--mode fresh`` times as the thesis does: each sample is a batch
of N calls after a cache eviction and a newly mapped workspace (its first touch is timed), and the row
records the batch (``timing_batch``). One image is reused across the batch.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from harness import analysis, config, store
from harness import machine as machine_mod
from harness.commands import positive_int
from harness.experiment import Experiment, run_experiment
from kernels.baselines import versioned
from kernels.candidate import Candidate, Workload
from studies.yaconv import headline

CONF = Path(__file__).resolve().parents[3] / "conf" / "workload"  # studies/yaconv/commands/ -> the repo
LAYERS_CSV = CONF / "yaconv_layers.csv"
TTILE_CSV = CONF / "ttile_layers.csv"
SETS = ("layers", "seed000", "fig5_4", "fig5_6")
# a few small layers of the thesis's list, one per common H and both filter sizes: < 2 min on 2 cores
QUICK_SEED000 = ("resnet18_04", "resnet18_09")
QUICK_LAYERS = [(7, 160, 320, 3, 1), (14, 96, 208, 3, 1), (28, 58, 58, 3, 1), (14, 120, 120, 5, 2)]


@dataclass(frozen=True)
class Layer:
    """A convolution as the thesis writes it: input H x W x C, M filters F x F, padding P, stride."""

    H: int
    W: int
    C: int
    M: int
    F: int
    P: int
    stride: int = 1
    models: str = ""

    @property
    def name(self) -> str:
        s = f"_s{self.stride}" if self.stride != 1 else ""
        return f"yc_h{self.H}_w{self.W}_c{self.C}_m{self.M}_f{self.F}_p{self.P}{s}"

    def workload(self) -> Workload:
        """Our operator has no padding: output (H + 2P - F) / stride + 1, input the padded image."""
        oh = (self.H + 2 * self.P - self.F) // self.stride + 1
        ow = (self.W + 2 * self.P - self.F) // self.stride + 1
        sizes = {"h": oh, "w": ow, "k": self.M, "c": self.C, "r": self.F, "s": self.F}
        return Workload.make(self.name, "conv2d", sizes, stride=self.stride)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def paper_layers() -> list[Layer]:
    """The 73 unique geometries, each with the models it occurs in (most frequent first)."""
    seen: dict[tuple[int, ...], list[str]] = {}
    for r in _rows(LAYERS_CSV):
        key = tuple(int(r[k]) for k in ("H", "W", "C", "M", "F", "P"))
        seen.setdefault(key, []).append(r["model"])
    out = [Layer(*k, models=",".join(dict.fromkeys(v))) for k, v in seen.items()]  # type: ignore[misc]
    return sorted(out, key=lambda layer: -len(seen[(layer.H, layer.W, layer.C, layer.M, layer.F, layer.P)]))


def seed000_layers() -> list[Layer]:
    """Seed 000's layers with filters > 1 (its H/W is the output size: input (H-1)*stride + F - 2P)."""
    out = []
    for r in _rows(TTILE_CSV):
        f, st, hw = int(r["rs"]), int(r["stride"]), int(r["hw"])
        if f == 1:
            continue  # the thesis leaves 1x1 layers to GEMM
        p = (f - 1) // 2
        h_in = (hw - 1) * st + f - 2 * p
        out.append(Layer(h_in, h_in, int(r["c"]), int(r["k_used"]), f, p, st, models=r["name"]))
    return out


def grid(which: str, quick: bool) -> list[Layer]:
    """Fig 5.4: H = W x M at C = 300, F = 3, P = 1; Fig 5.6: C x M at H = W = 7 (run.sh's values)."""
    if which == "fig5_4":
        hs = [7, 10, 12, 14, 16, 22] if quick else list(range(4, 57, 2))  # H + 2: 3 multiples of 6, 2 of 12
        ms = [64, 256, 512] if quick else [32, 64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024]
        return [Layer(h, h, 300, m, 3, 1) for h in hs for m in ms]
    cs = [32, 128, 512] if quick else [32, 64, 96, 128, 192, 256, 384, 512, 768, 960, 1024, 1152]
    return [Layer(7, 7, c, m, 3, 1) for c in cs for m in cs]


def layer_set(which: str, quick: bool, limit: int | None = None) -> list[Layer]:
    if which == "layers":
        layers = paper_layers()
        if quick:
            layers = [la for la in layers if (la.H, la.C, la.M, la.F, la.P) in QUICK_LAYERS]
    elif which == "seed000":
        layers = seed000_layers()
        if quick:  # one strided layer (YaConv not applicable) and one unit-stride layer
            layers = [la for la in layers if la.models in QUICK_SEED000]
    else:
        layers = grid(which, quick)
    return layers[:limit] if limit else layers


def thesis_batch(flops: int) -> int:
    """run.sh's batch: N = 1e9 / (2 H W C Fh Fw M) images (at least one), buffers allocated per batch."""
    return max(1, int(1e9 // flops))


def candidates(isa: str, with_ours: bool = True, with_window: bool = True) -> list[Candidate]:
    """YaConv (BLIS's microkernel; ours, in the default shape and in the shape chosen for the layer; with
    ours, BLIS's and ours chosen again with ``rows=window``) and im2col + BLIS sgemm: the same library's
    pieces on both sides. With ours, im2col + OpenBLAS's sgemm
    too: our microkernel uses the host's widest vectors, Debian's BLIS may not (AVX2 'haswell' kernels on
    an AVX-512 Xeon), so the best YaConv is compared with the best im2col as well."""
    out = [Candidate("conv_algo", "yaconv", (("ukr", "blis"),))]
    if with_ours:
        out.append(Candidate("conv_algo", "yaconv", (("target", isa), ("ukr", "ours"))))
        out.append(Candidate("conv_algo", "yaconv", (("shape", "auto"), ("target", isa), ("ukr", "ours"))))
    if with_ours and with_window:  # beyond the thesis: per filter row the rows that give output (§5.3)
        out.append(Candidate("conv_algo", "yaconv", (("rows", "window"), ("ukr", "blis"))))
        window = (("rows", "window"), ("shape", "auto"), ("target", isa), ("ukr", "ours"))
        out.append(Candidate("conv_algo", "yaconv", window))
    out.append(versioned(Candidate("conv_algo", "im2col", (("gemm", "blis"),))))  # BLIS's version in its key
    if with_ours:
        out.append(versioned(Candidate("conv_algo", "im2col", (("gemm", "openblas"),))))
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness yaconv", description=__doc__.splitlines()[0])
    p.add_argument(
        "--set", choices=SETS, default="layers", help="layer set (default: the thesis's 73 layers)"
    )
    p.add_argument("--quick", action="store_true", help="a few small layers / a reduced grid")
    p.add_argument("--limit", type=positive_int, default=None, help="first N layers only")
    p.add_argument("--no-ours", action="store_true", help="skip YaConv with our microkernel")
    p.add_argument(
        "--mode",
        choices=("hot", "cold", "fresh"),
        default="hot",
        help="timing mode (fresh: cold caches and a newly mapped workspace per call, as the thesis's "
        "per-batch buffers; its experiment is yaconv_<set>_fresh)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="time each layer's candidates in N interleaved rounds (a disturbed round shows as a spread "
        "instead of a verdict; one pass by default, as the thesis)",
    )
    p.add_argument("--results", type=Path, default=Path("results"))
    return p


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    m = machine_mod.detect()
    isa = "avx512" if "avx512" in m.isas else "avx2"
    cands = candidates(isa, not args.no_ours)
    layers = layer_set(args.set, args.quick, args.limit)
    # the timing group of the mode, as `harness run timing=<mode>` composes it, with this study's own
    # repetitions: one protocol whichever way a measurement is started
    timing = config.timing(
        args.mode,
        warmup=0 if args.mode != "hot" else 3,
        max_seconds=2.0 if args.quick else 5.0,
        max_reps=20 if args.quick else 50,
    )
    name = f"yaconv_{args.set}" + ("" if args.mode == "hot" else f"_{args.mode}")
    for n, layer in enumerate(layers, 1):
        print(f"[{name}] layer {n}/{len(layers)} {layer.name} ({layer.models})", file=sys.stderr)
        w = layer.workload()
        batch = thesis_batch(w.flops) if args.mode == "fresh" else 1
        exp = Experiment(
            name, w, cands, timing=replace(timing, batch=batch, rounds=args.rounds), results_dir=args.results
        )
        run_experiment(exp, machine=m)
    # the run's headline on this machine (the stored rows of the experiment, earlier runs included)
    summary = analysis.summarize(store.load(args.results, name))
    table = headline.per_layer(summary[summary["machine_fingerprint"] == m.fingerprint])
    lines = headline.headline(table) if not table.empty else [f"[{name}] no layer with both algorithms ok"]
    print("\n".join(lines))
