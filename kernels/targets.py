"""Vector targets as data: lanes, register file and the intrinsics the code generator emits."""

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


TARGETS: dict[str, Target] = {
    "avx512": Target(
        "avx512",
        16,
        32,
        "__m512",
        "_mm512_loadu_ps",
        "_mm512_storeu_ps",
        "_mm512_set1_ps",
        "_mm512_fmadd_ps",
        "_mm512_mul_ps",
        "_mm512_add_ps",
    ),
    "avx2": Target(
        "avx2",
        8,
        16,
        "__m256",
        "_mm256_loadu_ps",
        "_mm256_storeu_ps",
        "_mm256_set1_ps",
        "_mm256_fmadd_ps",
        "_mm256_mul_ps",
        "_mm256_add_ps",
    ),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {sorted(TARGETS)}") from None
