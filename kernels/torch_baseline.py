"""PyTorch (CPU) as a library baseline: a C++ wrapper with the kernel ABI around ATen's own calls.

The wrapper is compiled against the installed torch wheel's headers and libraries and run by the harness's C
driver, so its checks, hot/cold timing and rounds are those of every candidate. Our buffers are wrapped with
``at::from_blob`` (no copy); what a PyTorch user would do once per model (convert the weights to the layout
the op wants, pre-pack them) is done once per weights buffer, as the oneDNN wrapper does
(kernels.baselines): the driver never changes an input between calls, so the cached copy is always current.

- ``torch`` on matmul: ``c.addmm_(a, b)`` (accumulates, as the kernel ABI requires).
- ``torch`` on conv2d: ``at::conv2d`` on channels_last tensors (NHWC input, OIHW weights stored OHWI, as a
  model moved to channels_last holds them), then ``dst.add_(y)`` into the output.
- ``torch-packed`` on conv2d: the weights pre-packed in oneDNN's blocked format
  (``at::mkldnn_reorder_conv2d_weight`` with the input size) and the in-place fused op that Inductor's
  freezing emits for conv + add, ``mkldnn::_convolution_pointwise_.binary(dst, x, w, ..., "add")``: oneDNN
  accumulates into our NHWC output with its sum post-op.

torch is never imported here (it takes seconds and the harness does not need it): its directory comes from
``find_spec`` and its version from the package metadata.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
from importlib.util import find_spec
from pathlib import Path

from kernels.candidate import BaselineUnavailable, Candidate, KernelSource, Workload

#: the baseline names this module renders (kernels.baselines.TORCH)
NAMES = ("torch", "torch-packed")
_LIBS = ("libc10.so", "libtorch_cpu.so", "libtorch.so")  # libtorch_cpu holds ATen and the mkldnn:: ops


@functools.cache
def torch_dir() -> Path | None:
    """The installed torch package's directory (found without importing it), or None."""
    spec = find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _include_dirs(root: Path) -> tuple[Path, ...]:
    return (root / "include", root / "include" / "torch" / "csrc" / "api" / "include")


@functools.cache
def unavailable() -> str | None:
    """Why the torch baselines cannot be built here, or None."""
    root = torch_dir()
    if root is None:
        return "torch is not installed (no module torch)"
    if not (root / "include" / "ATen" / "ATen.h").exists():
        return f"torch at {root} has no C++ headers ({root / 'include' / 'ATen' / 'ATen.h'} missing)"
    missing = [name for name in _LIBS if not (root / "lib" / name).exists()]
    if missing:
        return f"torch at {root} lacks {', '.join(missing)} in {root / 'lib'}"
    return None


@functools.cache
def version() -> str | None:
    """torch's version string (e.g. ``2.13.0+cpu``), from the package metadata."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def onednn_version() -> str | None:
    """The version of the oneDNN inside torch, from the dnnl_version.h its wheel ships (e.g. ``3.12.0``)."""
    root = torch_dir()
    header = root / "include" / "oneapi" / "dnnl" / "dnnl_version.h" if root else None
    if header is None or not header.exists():
        return None
    text = header.read_text()
    parts = [re.search(rf"#define DNNL_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) or None


# -- C++ ----------------------------------------------------------------------------------------------------
# Shared by every wrapper: includes (per-operator headers, not ATen/ATen.h, which doubles the compile time),
# the announcement and kernel(), which turns any exception into a non-zero code and a message on stderr.
_PROLOGUE = """#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/InferenceMode.h>
#include <cstdio>
#include <string>

/* the token after `key` in `text` ("Version 2024.2-Product" -> "2024.2"), or "?" */
static std::string word_after(const std::string &text, const std::string &key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "?";
  const size_t from = at + key.size();
  return text.substr(from, text.find_first_of(" )-", from) - from);
}

/* our row-major buffer as a tensor of these sizes and strides (no copy) */
static at::Tensor wrap(const float *data, at::IntArrayRef sizes, at::IntArrayRef strides) {
  return at::from_blob(const_cast<float *>(data), sizes, strides, at::kFloat);
}
"""

_KERNEL = """
extern "C" int kernel(float *const *tensors, void *workspace) {
  (void)workspace;
  static bool ready = false;
  try {
    if (!ready) { at::set_num_threads(%(threads)d); }
    c10::InferenceMode guard; /* as a user runs a model for inference: no autograd bookkeeping */
    compute(tensors[0], tensors[1], tensors[2]);
    if (!ready) {
      ready = true;
      std::fprintf(stderr, "harness-impl: torch %(version)s %%s\\n", describe(tensors[1]).c_str());
    }
    return 0;
  } catch (const c10::Error &e) {
    std::fprintf(stderr, "torch: %%s\\n", e.what_without_backtrace());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "torch: %%s\\n", e.what());
  }
  return 1;
}
"""

_MATMUL = """#include <ATen/ops/addmm.h>

static void compute(float *c, const float *a, const float *b) {
  at::Tensor tc = wrap(c, {%(i)d, %(j)d}, {%(j)d, 1});
  tc.addmm_(wrap(a, {%(i)d, %(k)d}, {%(k)d, 1}), wrap(b, {%(k)d, %(j)d}, {%(j)d, 1}));  /* c += a @ b */
}

static std::string describe(const float *) {
  const bool mkl = at::globalContext().hasMKL();
  return std::string("matmul addmm_ (BLAS: ") + (mkl ? "MKL " + word_after(at::get_mkl_version(), "Version ")
                                                     : "not MKL") + ")";
}
"""

# Input and output: NHWC buffers seen as channels_last NCHW tensors, i.e. sizes [1,C,H,W] with strides
# [H*W*C, 1, W*C, C]. Weights: our HWIO [r][s][c][k] permuted to OIHW and stored OHWI (channels_last).
_CONV_COMMON = """
static const float *weights_seen = nullptr;
static at::Tensor weights;  /* the weights as torch wants them, converted once per weights buffer */

static at::Tensor channels_last_oihw(const float *wei) {
  return wrap(wei, {%(r)d, %(s)d, %(c)d, %(k)d}, {%(s)d * %(c)d * %(k)d, %(c)d * %(k)d, %(k)d, 1})
      .permute({3, 2, 0, 1})
      .contiguous(at::MemoryFormat::ChannelsLast);
}

static at::Tensor input(const float *src) {
  return wrap(src, {1, %(c)d, %(ih)d, %(iw)d}, {%(ih)d * %(iw)d * %(c)d, 1, %(iw)d * %(c)d, %(c)d});
}

static at::Tensor output(float *dst) {
  return wrap(dst, {1, %(k)d, %(h)d, %(w)d}, {%(h)d * %(w)d * %(k)d, 1, %(w)d * %(k)d, %(k)d});
}

static std::string onednn() { return "oneDNN " + word_after(at::get_mkldnn_version(), " v"); }
"""

# at::conv2d is what a user's nn.Conv2d runs. ATen sends batch-1 layers with kernels up to 3x3 and inputs of
# at most 20480 elements to its own im2col + BLAS convolution (ConvBackend::Slow2d), larger ones to oneDNN,
# which then reorders the weights into its blocked format on every call (what torch-packed avoids): the
# impl line names the backend chosen.
_CONV = """#include <ATen/native/ConvUtils.h>
#include <ATen/ops/conv2d.h>
%(common)s
static void compute(float *dst, const float *src, const float *wei) {
  if (wei != weights_seen) { weights = channels_last_oihw(wei); weights_seen = wei; }
  const at::Tensor y = at::conv2d(input(src), weights, {}, {%(stride)d, %(stride)d});
  /* an extra pass over the output (read y, read and write dst) that oneDNN's sum post-op avoids
     (baselines onednn and torch-packed accumulate inside the convolution) */
  output(dst).add_(y);
}

/* which of ATen's convolution backends at::conv2d picked for these tensors (oneDNN or its own) */
static std::string describe(const float *src) {
  using at::native::ConvBackend;
  const std::vector<c10::SymInt> stride(2, c10::SymInt(%(stride)d)), zero(2, c10::SymInt(0)),
      one(2, c10::SymInt(1));
  const ConvBackend b = at::native::select_conv_backend(input(src), weights, std::nullopt, stride, zero, one,
                                                        false, zero, c10::SymInt(1), std::nullopt);
  const std::string name = b == ConvBackend::Mkldnn          ? "Mkldnn"
                           : b == ConvBackend::Slow2d        ? "Slow2d (im2col + BLAS)"
                           : b == ConvBackend::SlowDilated2d ? "SlowDilated2d"
                           : b == ConvBackend::NnpackSpatial ? "NnpackSpatial"
                           : b == ConvBackend::Xnnpack2d     ? "Xnnpack2d"
                                                             : "backend " + std::to_string(int(b));
  return "conv2d channels_last at::conv2d -> " + name + " + add_ (" + onednn() + ")";
}
"""

_CONV_PACKED = """#include <ATen/core/dispatch/Dispatcher.h>
%(common)s
/* Two ops of the mkldnn:: library that libtorch_cpu registers (no ATen header: reached through the
   dispatcher), as Inductor's freezing emits them for a conv whose output is added to (mkldnn_fusion.py).
   (aten::mkldnn_reorder_conv2d_weight would need the weights as an MKLDNN tensor first.) */
using Pack = at::Tensor(const at::Tensor &, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t,
                        at::OptionalIntArrayRef);
using ConvAdd = at::Tensor &(at::Tensor &, const at::Tensor &, const at::Tensor &,
                             const std::optional<at::Tensor> &, at::IntArrayRef, at::IntArrayRef,
                             at::IntArrayRef, int64_t, c10::string_view, std::optional<at::Scalar>,
                             std::optional<c10::string_view>, c10::List<std::optional<at::Scalar>>,
                             std::optional<c10::string_view>);

static void compute(float *dst, const float *src, const float *wei) {
  auto &ops = c10::Dispatcher::singleton();
  static const auto pack = ops.findSchemaOrThrow("mkldnn::_reorder_convolution_weight", "").typed<Pack>();
  static const auto conv_add =
      ops.findSchemaOrThrow("mkldnn::_convolution_pointwise_", "binary").typed<ConvAdd>();
  const int64_t stride[2] = {%(stride)d, %(stride)d}, zero[2] = {0, 0}, one[2] = {1, 1};
  if (wei != weights_seen) {
    /* oneDNN's blocked weights format for this input size (an opaque MKLDNN tensor) */
    const int64_t input_size[4] = {1, %(c)d, %(ih)d, %(iw)d};
    weights = pack.call(channels_last_oihw(wei), zero, stride, one, 1, at::IntArrayRef(input_size));
    weights_seen = wei;
  }
  /* out += conv(x, w): oneDNN writes into our NHWC output with its sum post-op (no extra pass) */
  at::Tensor out = output(dst);
  conv_add.call(out, input(src), weights, std::nullopt, zero, stride, one, 1, "add", std::nullopt,
                std::nullopt, c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

static std::string describe(const float *) {
  return "conv2d packed weights (" + std::string(weights.is_mkldnn() ? "oneDNN blocked" : "plain") +
         ") mkldnn::_convolution_pointwise_.binary add (" + onednn() + " sum post-op)";
}
"""


def _unsupported(reason: str) -> Exception:
    return BaselineUnavailable(reason)


def render_torch(name: str, workload: Workload, threads: int) -> KernelSource:
    """The C++ wrapper running baseline ``name`` (``torch`` or ``torch-packed``) on ``workload``."""
    op = workload.op.name
    if name not in NAMES:
        raise ValueError(f"unknown torch baseline {name!r}; known: {', '.join(NAMES)}")
    if op not in ("matmul", "conv2d"):
        raise _unsupported(f"baseline {name} implements matmul and conv2d only, not {op}")
    if name == "torch-packed" and op != "conv2d":
        raise _unsupported(f"baseline {name} is a convolution, not {op}")
    if reason := unavailable():
        raise _unsupported(f"baseline {name}: {reason}")
    root = torch_dir()
    assert root is not None  # unavailable() said so
    sizes = dict(workload.size)
    if op == "matmul":
        body = _MATMUL % sizes
    else:
        stride = int(dict(workload.op.params).get("stride", 1))  # type: ignore[call-overload]
        sizes.update(stride=stride, ih=(sizes["h"] - 1) * stride + sizes["r"])
        sizes["iw"] = (sizes["w"] - 1) * stride + sizes["s"]
        template = _CONV if name == "torch" else _CONV_PACKED
        body = template % {**sizes, "common": _CONV_COMMON % sizes}
    lib = root / "lib"
    # the version and the library file (path and size) are part of the source: an upgraded torch gets a
    # fresh build, and the row's source hash says which torch was used
    cpu = os.path.realpath(lib / "libtorch_cpu.so")
    head = (
        f"/* baseline: {name} (PyTorch {version()}), {threads} thread(s), {workload.op.text()} */\n"
        f"/* library: {cpu} ({os.path.getsize(cpu)} bytes) */\n"
    )
    code = head + _PROLOGUE + body + _KERNEL % {"threads": threads, "version": version()}
    cflags = ("-x", "c++", "-std=c++17", *(f"-I{d}" for d in _include_dirs(root)))
    libs = (*(f"-Wl,--no-as-needed,{lib / f}" for f in _LIBS), f"-Wl,-rpath,{lib}", "-lstdc++")
    return KernelSource(code=code, target="any", cflags=cflags, libs=libs)


def render_candidate(candidate: Candidate, workload: Workload) -> KernelSource:
    """Renderer entry point (``kernels.candidate.RENDERERS`` or kernels.baselines.render_baseline)."""
    threads = int(candidate.option("threads", 1))  # type: ignore[call-overload]
    if threads < 1:
        raise ValueError(f"baseline {candidate.text}: threads must be >= 1, got {threads}")
    return render_torch(candidate.text, workload, threads)
