"""Apache TVM as a second convolution baseline (seed 000 compares its search with oneDNN and with TVM).

The layer is written in TVM's tensor-expression language with our operator's exact semantics,
``O[h][w][k] += I[h*stride+r][w*stride+s][c] * K[r][s][c][k]`` (NHWC, HWIO, batch 1, no padding), tuned by
MetaSchedule (TVM's auto-scheduler since Ansor was removed) for this CPU and one core, and exported as a
shared library. :func:`wrapper_source` calls it through the kernel ABI (``int kernel(float *const *tensors,
void *ws)``), so the harness checks and times it like any candidate (baseline ``tvm``, option ``module``).

TVM comes from PyPI (``pip install '.[tvm]'``: apache-tvm 0.27.0.post1 needs apache-tvm-ffi 0.1.14.post0;
with the newer 0.1.15.post2 that its ``>=`` allows, every IR serialisation segfaults, found 2026-11-24).
Nothing here imports TVM at module level: the harness runs without it and reports the baseline
unavailable.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels.candidate import Workload

#: MetaSchedule's cost models: "xgb" (its default, learned) or "random" (no model: quick tests), and its
#: search strategies: "evolutionary" (its default) or "replay-trace" (random schedules: quick tests).
COST_MODELS = ("xgb", "random")
STRATEGIES = ("evolutionary", "replay-trace")
#: How MetaSchedule timed each trial (its LocalRunner's EvaluatorConfig defaults, used by ``tune``): not the
#: harness's timing, so its per-trial times are reported as TVM's own (Fig 6.2's auto-tuner curve).
RUNNER = (
    "MetaSchedule LocalRunner defaults: 1 warm-up, then the mean of 3 runs (more to reach 100 ms), hot cache"
)
#: A schedule's build time limit. MetaSchedule's default, 30 s, failed every build of a 4-trial CI run on a
#: host slowed fourfold (the same builds take about 8 s on a quiet one): a slow build is not a bad schedule.
#: 120 s failed both builds of the heavy test on a busy Zen 3 (2026-11-28; about 60 s a build there alone).
BUILD_TIMEOUT_S = 300.0
#: MetaSchedule records a trial that failed to build or run as 1e10 s.
FAILED_S = 1e9
#: MetaSchedule's JSON database of measured trials, in a module's ``.tuning`` directory.
TUNING_DB = "database_tuning_record.json"


class TVMUnavailable(RuntimeError):
    """TVM or its FFI is not installed here (the message says how to install it)."""


def unavailable() -> str | None:
    """Why TVM cannot be used here, or None."""
    for mod in ("tvm", "tvm_ffi"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (`make tvm`: pip install '.[tvm]', Apache TVM from PyPI)"
    return None


def ffi_paths() -> tuple[Path, Path]:
    """tvm_ffi's C headers directory and its shared library (the exported module calls back into it to
    report an argument error)."""
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or spec.origin is None:
        raise TVMUnavailable(unavailable() or "tvm_ffi not found")
    root = Path(spec.origin).parent
    include, lib = root / "include", root / "lib" / "libtvm_ffi.so"
    if not (include / "tvm" / "ffi" / "c_api.h").exists() or not lib.exists():
        raise TVMUnavailable(f"tvm_ffi at {root} has no include/tvm/ffi/c_api.h or lib/libtvm_ffi.so")
    return include, lib


def _geometry(workload: Workload) -> tuple[dict[str, int], int, list[tuple[int, ...]]]:
    """Sizes, stride and the ABI's tensor shapes (O, I, K: ``Workload.shapes``) of a convolution."""
    if workload.op.name != "conv2d":
        raise ValueError(f"the TVM baseline is a convolution, not {workload.op.name}")
    return dict(workload.size), int(dict(workload.op.params).get("stride", 1)), workload.shapes()


def prim_func(workload: Workload, wrong_reduction: bool = False) -> Any:
    """The layer as a TIR function ``main(I, K, O0, O)`` computing ``O = O0 + conv(I, K)``; the wrapper
    passes our output buffer as both O0 and O (each element is read before it is written, and the
    function is marked as allowing aliases). ``wrong_reduction`` drops the last input channel: a mutant
    the harness's check must reject."""
    from tvm import te

    z, st, (o_shape, i_shape, k_shape) = _geometry(workload)
    inp = te.placeholder(i_shape, "float32", name="I")
    wei = te.placeholder(k_shape, "float32", name="K")
    old = te.placeholder(o_shape, "float32", name="O0")
    rr, rs = te.reduce_axis((0, z["r"]), "r"), te.reduce_axis((0, z["s"]), "s")
    rc = te.reduce_axis((0, z["c"] - 1 if wrong_reduction else z["c"]), "c")
    conv = te.compute(
        o_shape,
        lambda y, x, f: te.sum(inp[y * st + rr, x * st + rs, rc] * wei[rr, rs, rc, f], axis=[rr, rs, rc]),
        name="conv",
    )
    out = te.compute(o_shape, lambda y, x, f: old[y, x, f] + conv[y, x, f], name="O")
    return te.create_prim_func([inp, wei, old, out]).with_attr("tir.noalias", False)


def host_target() -> Any:
    """LLVM for this CPU (its -mcpu, so AVX2 or AVX-512 as the host has), one core: a single-thread
    baseline, as oneDNN is run."""
    import tvm
    from tvm.target import codegen

    return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "num-cores": 1})


@dataclass(frozen=True)
class TunedModule:
    path: Path  # the exported shared library
    record: dict[str, Any]  # how it was made: TVM version, target, trials, seed, seconds, TVM's own latency


def module_path(out_dir: Path, workload: Workload, trials: int, seed: int, how: str) -> Path:
    return Path(out_dir) / f"{workload.name}-t{trials}-s{seed}-{how}.so"


def trials_of(module: str) -> int | None:
    """The trial count in a module's name (``module_path``); None for a name it did not make."""
    m = re.fullmatch(r".+-t(\d+)-s\d+-.+\.so", Path(module).name)
    return int(m.group(1)) if m else None


def module_of(candidate_options: str | None) -> str | None:
    """The module a ``tvm`` baseline row measured, from the row's ``candidate_options`` (JSON)."""
    return json.loads(candidate_options or "{}").get("module")


def is_tuned(path: Path) -> bool:
    """Whether the module ``path`` and its tuning record are there (``tune`` then reuses them)."""
    return Path(path).exists() and Path(path).with_suffix(".json").exists()


def record_in(results_dir: Path, module: str) -> Path:
    """Where the tuning record of ``module`` is under ``results_dir`` (``tvm/<module>.json``), wherever the
    module was when a row measured it (a row restored from an archive names another machine's path)."""
    return Path(results_dir) / "tvm" / Path(module).with_suffix(".json").name


def trial_seconds(work_dir: Path) -> list[float | None]:
    """Every trial MetaSchedule measured while tuning into ``work_dir``, in the order measured (its JSON
    database appends each record as it is committed, a batch in candidate order): TVM's own run time in
    seconds, None for a trial that failed."""
    times: list[float | None] = []
    for line in (Path(work_dir) / TUNING_DB).read_text().splitlines():
        if not line.strip():
            continue
        secs = [float(x) for x in json.loads(line)[1][1]]  # [workload index, [trace, run_secs, target, args]]
        mean = sum(secs) / len(secs) if secs else FAILED_S
        times.append(None if mean >= FAILED_S else mean)
    return times


def _with_trials(record: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    """``record`` with the per-trial times of its tuning database, where the database is still there."""
    if (Path(work_dir) / TUNING_DB).exists():
        return {**record, "runner": RUNNER, "trial_seconds": trial_seconds(work_dir)}
    return record


def tune(
    workload: Workload,
    trials: int,
    out_dir: Path,
    seed: int = 0,
    cost_model: str = "xgb",
    strategy: str = "evolutionary",
    wrong_reduction: bool = False,
) -> TunedModule:
    """Tune the layer with MetaSchedule (``trials`` measured candidates, on this machine), export the best
    as ``module_path(...)`` and write its record beside it (``.json``). An existing module is reused."""
    if reason := unavailable():
        raise TVMUnavailable(reason)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, got {cost_model!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    path = module_path(out_dir, workload, trials, seed, f"{cost_model}-{strategy}")
    if wrong_reduction:
        path = path.with_name(path.stem + "-mutant.so")
    meta, work = path.with_suffix(".json"), path.with_suffix(".tuning")
    if is_tuned(path):
        record = json.loads(meta.read_text())
        if "trial_seconds" not in record and "trial_seconds" in (full := _with_trials(record, work)):
            record = full  # tuned before the per-trial times were recorded: add them once
            meta.write_text(json.dumps(record, indent=1))
        return TunedModule(path, record)
    import tvm
    from tvm.s_tir import meta_schedule as ms

    path.parent.mkdir(parents=True, exist_ok=True)
    mod = tvm.IRModule({"main": prim_func(workload, wrong_reduction)})
    target = host_target()
    start = time.monotonic()
    # the runner's processes inherit it: a trial's parallel loops run on one thread, as the wrapper runs them
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=BUILD_TIMEOUT_S)
    db = ms.tune_tir(mod, target, work_dir=str(work), max_trials_global=trials,
                     num_trials_per_iter=min(64, trials), num_tuning_cores=1, seed=seed,
                     cost_model=cost_model, strategy=strategy, builder=builder)  # fmt: skip
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        raise RuntimeError(f"MetaSchedule found no valid schedule for {workload.name} in {trials} trials")
    lib = tvm.compile(sch.mod, target=target)
    tmp = path.with_suffix(".tmp.so")
    lib.export_library(str(tmp))
    tmp.replace(path)  # complete or absent: a crash never leaves half a module under the final name
    best = [rec.run_secs for rec in db.get_all_tuning_records() if rec.run_secs]
    latency = min((float(min(x.value for x in secs)) for secs in best), default=None)
    record = {
        "tvm": tvm.__version__, "target": str(target), "trials": trials, "seed": seed,
        "cost_model": cost_model, "strategy": strategy, "tvm_num_threads": os.environ["TVM_NUM_THREADS"],
        "build_timeout_s": BUILD_TIMEOUT_S, "tuning_seconds": round(time.monotonic() - start, 1),
        "tvm_best_latency_s": latency, "schedule_trace": str(sch.trace) if sch.trace else None,
        "module_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }  # fmt: skip
    record = _with_trials(record, work)
    meta.write_text(json.dumps(record, indent=1))
    return TunedModule(path, record)


def wrapper_source(module: Path, workload: Workload) -> str:
    """C source of the kernel ABI around the exported module's ``__tvm_ffi_main`` (TVM FFI's C calling
    convention: an array of tagged values, here four DLTensor pointers). The module's hash is in the
    source, so a re-tuned module is a new source hash in the row."""
    _, st, shapes = _geometry(workload)
    o, i, k = ("".join(f"[{n}]" for n in shape) for shape in shapes)
    o_dims, i_dims, k_dims = (", ".join(map(str, shape)) for shape in shapes)
    digest = hashlib.sha256(Path(module).read_bytes()).hexdigest()
    return f"""/* baseline: tvm (MetaSchedule), 1 thread, NHWC x HWIO -> NHWC, stride {st} */
/* O{o} += I{i} * K{k} */
/* module: {Path(module).resolve()} sha256 {digest} */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>

extern int __tvm_ffi_main(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result);

/* The module calls the TVM runtime through function pointers its loader fills in; without the runtime we
   fill them: one thread (a parallel loop runs as one task, as TVM_NUM_THREADS=1 would) and 64-byte aligned
   workspaces, reused as the runtime's pool reuses them. Weak: a module declares only the ones it uses. */
typedef struct {{ void *sync_handle; int32_t num_task; }} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv *penv, void *cdata);
extern void *__TVMBackendParallelLaunch __attribute__((weak));
extern void *__TVMBackendParallelBarrier __attribute__((weak));
extern void *__TVMBackendAllocWorkspace __attribute__((weak));
extern void *__TVMBackendFreeWorkspace __attribute__((weak));

static int launch(FTVMParallelLambda flambda, void *cdata, int num_task) {{
  (void)num_task;
  TVMParallelGroupEnv env = {{NULL, 1}};
  return flambda(0, &env, cdata);
}}
static int barrier(int task_id, TVMParallelGroupEnv *penv) {{ (void)task_id; (void)penv; return 0; }}

/* TVM's runtime keeps freed workspaces for reuse (its WorkspacePool), and a schedule may ask for one in
   every iteration of a loop; malloc and free each time (mmap, munmap and page faults for large ones) would
   be timed as the module's. Kept here the same way: freed blocks are reused by later requests that fit.
   Each block carries its size in a 64-byte header, so the data stays 64-byte aligned. */
#define POOL_SLOTS 32
static void *pool[POOL_SLOTS];
static int pooled;
static void *alloc_ws(int device_type, int device_id, uint64_t nbytes, int code, int bits) {{
  (void)device_type; (void)device_id; (void)code; (void)bits;
  uint64_t size = (nbytes + 63) / 64 * 64;
  int fit = -1;
  for (int i = 0; i < pooled; ++i)
    if (*(uint64_t *)pool[i] >= size && (fit < 0 || *(uint64_t *)pool[i] < *(uint64_t *)pool[fit])) fit = i;
  char *block;
  if (fit >= 0) {{
    block = pool[fit];
    pool[fit] = pool[--pooled];
  }} else {{
    block = aligned_alloc(64, size + 64);
    if (!block) return NULL;
    *(uint64_t *)block = size;
  }}
  return block + 64;
}}
static int free_ws(int device_type, int device_id, void *ptr) {{
  (void)device_type; (void)device_id;
  char *block = (char *)ptr - 64;
  if (pooled < POOL_SLOTS) pool[pooled++] = block;
  else free(block);
  return 0;
}}

static int64_t shape_i[3] = {{{i_dims}}}, shape_k[4] = {{{k_dims}}};
static int64_t shape_o[3] = {{{o_dims}}};

static DLTensor tensor(void *data, int64_t *shape, int32_t ndim) {{
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;  /* strides NULL: compact row-major, as our tensors are */
  return t;
}}

int kernel(float *const *tensors, void *workspace) {{
  (void)workspace;
  if (&__TVMBackendParallelLaunch) __TVMBackendParallelLaunch = (void *)launch;
  if (&__TVMBackendParallelBarrier) __TVMBackendParallelBarrier = (void *)barrier;
  if (&__TVMBackendAllocWorkspace) __TVMBackendAllocWorkspace = (void *)alloc_ws;
  if (&__TVMBackendFreeWorkspace) __TVMBackendFreeWorkspace = (void *)free_ws;
  DLTensor t[4] = {{tensor(tensors[1], shape_i, 3), tensor(tensors[2], shape_k, 4),
                    tensor(tensors[0], shape_o, 3), tensor(tensors[0], shape_o, 3)}};
  TVMFFIAny args[4], result;
  memset(args, 0, sizeof args);
  memset(&result, 0, sizeof result);
  for (int i = 0; i < 4; ++i) {{
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].v_ptr = &t[i];
  }}
  result.type_index = kTVMFFINone;
  return __tvm_ffi_main(NULL, args, 4, &result) ? 300 : 0;
}}
"""
