"""The one configuration: ``conf/`` composed by Hydra, for ``harness run`` and for the study commands
that run outside Hydra's launcher alike, so a timing protocol has one set of defaults (the timing group,
``conf/timing/<mode>.yaml``) whichever way an experiment is started."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.run import TimingConfig

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = Path(os.environ.get("HARNESS_CONF", ROOT / "conf"))


def target_isa(target: str) -> str:
    """The ISA a run generates code for: ``target`` itself, or this CPU's best for ``auto``."""
    if target != "auto":
        return target
    from harness import machine

    return machine.detect().best_isa or "avx2"


def register_resolvers() -> None:
    """``${isa:${target}}`` in a config: the ISA of :func:`target_isa`, so a space keeps what differs per
    ISA (register tiles: 16 vector registers on AVX2, 32 on AVX-512) as data, picked by the target, and a
    user's override of the key still wins (conf/space/gemm_tuned.yaml)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("isa", target_isa, replace=True)


def composed(overrides: list[str]) -> dict[str, Any]:
    """The default config with ``overrides``, as ``harness run`` composes it, resolved to plain data."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        c = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    assert isinstance(c, dict)
    return c


def timing(mode: str = "hot", **overrides: Any) -> TimingConfig:
    """The timing group ``mode`` (``conf/timing/<mode>.yaml``, what ``harness run timing=<mode>`` uses),
    with a study's own ``overrides`` (its repetitions, its batch...) on top."""
    return TimingConfig(**{**composed([f"timing={mode}"])["timing"], **overrides})
