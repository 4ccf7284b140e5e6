"""The layout's rules, read from the import graph: the core (harness, kernels, reports) never imports a
study (it finds them by convention, harness.studies), and a study's plug-ins are found where the
convention says."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness import cli, studies
from reports import figures

ROOT = Path(__file__).resolve().parent.parent
CORE = ("harness", "kernels", "reports")


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (inside functions too), as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from harness import store`` counts as harness.store)."""
    modules = {}
    for package in (*CORE, studies.PACKAGE):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    return {m: {d for d in imports_of(p) if d in modules and d != m} for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_never_imports_a_study() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imports_of(path) if m.split(".")[0] == studies.PACKAGE)
        for package in CORE
        for path in (ROOT / package).rglob("*.py")
    }
    assert {f: m for f, m in offenders.items() if m} == {}


def test_imports_of_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from studies.x import figures\n    import studies.y\n")
    assert {"studies.x", "studies.x.figures", "studies.y"} <= imports_of(source)


def test_a_study_is_found_by_its_folder() -> None:
    assert "permutations" in studies.names()
    assert "studies.permutations.figures" in studies.modules("figures")
    assert cli.plugin_modules()["permutations"] == "studies.permutations.commands.permutations"
    assert "permutations_fig4_3" in figures.CLAIMS  # from studies/permutations/claims.yaml
    builders = {f"{b.__module__}.{b.__qualname__}" for b in figures.all_builders()}
    assert "studies.permutations.figures.winners" in builders
    assert (ROOT / "studies" / "permutations" / "catalogue.yaml") in studies.files("catalogue.yaml")


def test_a_study_declares_its_candidate_kinds() -> None:
    from kernels import candidate

    assert "conv_algo" not in candidate.RENDERERS  # not the core's
    assert candidate.renderers()["conv_algo"] == "studies.yaconv.kernels:render_conv_algo"
    assert cli.plugin_modules()["yaconv-counters"] == "studies.yaconv.commands.yaconv_counters"
    from kernels import space

    assert "gemm_variant" not in space.EXPANDERS
    assert space.expanders()["gemm_variant"] == "studies.gemm_family.kernels:space_entry"


def test_a_kind_declared_twice_is_named(monkeypatch) -> None:  # noqa: ANN001
    import studies.permutations as perm_pkg

    monkeypatch.setattr(perm_pkg, "RENDERERS", {"conv_algo": "x:y"}, raising=False)
    with pytest.raises(
        ValueError, match="'conv_algo' is declared by both studies 'permutations' and 'yaconv'"
    ):
        studies.declared("RENDERERS")


def test_no_private_name_crosses_modules() -> None:
    """``from harness.experiment import _base_row`` made a private helper another module's API."""
    crossing = {}
    for package in (*CORE, studies.PACKAGE):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    private = [
                        a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                    ]
                    if private and node.module.split(".")[0] in (*CORE, studies.PACKAGE):
                        crossing[str(path.relative_to(ROOT))] = private
    assert crossing == {}


def test_the_measuring_code_never_imports_the_tools_that_test_it() -> None:
    """The mutant catalogue and the fuzzer (harness.verify) test the pipeline; the pipeline does not lean on
    them."""
    graph = import_graph()
    users = {m for m, deps in graph.items() if not m.startswith("harness.verify")
             and any(d.startswith("harness.verify") for d in deps)}  # fmt: skip
    assert users == set()
    assert "harness.verify.mutants" in graph and "harness.verify.fuzz" in graph
