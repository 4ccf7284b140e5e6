"""Vector targets as data: lanes, register file and the intrinsics the code generator emits."""

# fmt: off

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    lanes: int
    registers: int
    vtype: str
    load: str
    store: str
    set1: str
    fmadd: str
    mul: str
    add: str
    # partial vector tiles: a mask of ``n`` valid lanes, and masked load / store (format strings)
    mask_type: str
    mask_make: str
    masked_load: str
    masked_store: str
    prelude: str = ""  # file-scope declarations the masks need
    # codegen.broadcast=embedded: an FMA whose broadcast operand comes from memory (EVEX {1to16}), as a
    # static function the kernel calls as fmadd_bcst(vector, &element, acc); "" where the ISA has none
    fmadd_bcst: str = ""
    fmadd_bcst_def: str = ""


TARGETS: dict[str, Target] = {
    "avx512": Target(
        name="avx512", lanes=16, registers=32, vtype="__m512",
        load="_mm512_loadu_ps", store="_mm512_storeu_ps", set1="_mm512_set1_ps",
        fmadd="_mm512_fmadd_ps", mul="_mm512_mul_ps", add="_mm512_add_ps",
        mask_type="__mmask16", mask_make="(__mmask16)((1u << ({n})) - 1u)",
        masked_load="_mm512_maskz_loadu_ps({m}, {p})", masked_store="_mm512_mask_storeu_ps({p}, {m}, {v})",
        # gcc and clang fold a broadcast used once into the FMA but keep one used by several FMAs in a
        # register: a 7 x 4 tile then needs 28 accumulators + 4 operands + the broadcast, 33 of the 32 zmm
        # registers, and spills an accumulator (resnet18_12 on AVX-512, issue 32). In asm the broadcast
        # stays in the FMA, as oneDNN's JIT emits it (measured slower than the spill on an Intel Xeon with
        # AMX: docs/schemes.md). %{ %} are asm's escaped braces.
        fmadd_bcst="ttile_fmadd_bcst",
        fmadd_bcst_def=(
            "static inline __attribute__((always_inline)) __m512 ttile_fmadd_bcst("
            "__m512 b, const float *x, __m512 acc) {\n"
            '  __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(b), "m"(*x));\n'
            "  return acc;\n"
            "}"
        ),
    ),
    "avx2": Target(
        name="avx2", lanes=8, registers=16, vtype="__m256",
        load="_mm256_loadu_ps", store="_mm256_storeu_ps", set1="_mm256_set1_ps",
        fmadd="_mm256_fmadd_ps", mul="_mm256_mul_ps", add="_mm256_add_ps",
        # no mask registers: an integer vector whose lane sign bits select, cut from a table
        mask_type="__m256i", mask_make="_mm256_loadu_si256((const __m256i *)(ttile_lanes + 8 - ({n})))",
        masked_load="_mm256_maskload_ps({p}, {m})", masked_store="_mm256_maskstore_ps({p}, {m}, {v})",
        prelude="static const int ttile_lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};",  # noqa: E501
    ),
}
# fmt: on


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {sorted(TARGETS)}") from None
