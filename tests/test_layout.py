"""The tree shows the design (issue 32), and stays that way: the core imports neither door, neither door imports the
other, the samples door's claims and the task door's claims import only their own door, there is no import circle
among audit/, world/ (its experiments included) and rlhf/, no module is over 500 lines, and the package roots stay
short. The import graph is read from the source with ast, imports inside functions included (a lazy import is
still a dependency)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("audit", "world", "rlhf")
MAX_LINES = 500
ROOT_MODULES = {"audit": 12, "world": 15}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(*dirs) -> dict[str, Path]:
    return {module_name(p): p for d in dirs for p in sorted((ROOT / d).rglob("*.py")) if "__pycache__" not in p.parts}


def imported(path: Path, name: str) -> set[str]:
    """Every module the file imports, absolute, wherever the import stands (top level or inside a function)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)     # from package import module
    return out


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `modules` it imports (an imported name resolves to the longest module prefix)."""
    edges = {}
    for name, path in modules.items():
        deps = set()
        for target in imported(path, name):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        edges[name] = deps
    return edges


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in edges.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges():
    return graph(sources(*PACKAGES))


def test_the_graph_sees_lazy_and_relative_imports(edges):
    """The reader itself: a relative import inside a function (audit.task.stress_ray's batch_outcome) is an edge."""
    assert "audit.task.stress_batch" in edges["audit.task.stress_ray"]
    assert "audit.core.claims_runner" in edges["audit.samples.certify"]


def test_no_import_circles(edges):
    assert circles(edges) == []


def test_the_core_imports_neither_door(edges):
    core = [m for m in edges if m.startswith("audit.core")]
    assert core
    bad = {m: sorted(d for d in reachable(edges, m) if d.startswith(("audit.task", "audit.samples"))) for m in core}
    assert not any(bad.values()), bad


@pytest.mark.parametrize("door,other", [("audit.samples", "audit.task"), ("audit.task", "audit.samples")])
def test_a_door_never_imports_the_other(edges, door, other):
    mine = [m for m in edges if m == door or m.startswith(door + ".")]
    assert mine
    bad = {m: sorted(d for d in reachable(edges, m) if d == other or d.startswith(other + ".")) for m in mine}
    assert not any(bad.values()), bad


def test_the_samples_door_reaches_no_torch_code(edges):
    """Statically, beside tests/test_samples.py's import check: nothing the samples door imports imports torch."""
    modules = sources(*PACKAGES)
    door = [m for m in edges if m.startswith("audit.samples")]
    torch_users = {m for m, p in modules.items() if any(t.split(".")[0] == "torch" for t in imported(p, m))}
    bad = {m: sorted(reachable(edges, m) & torch_users) for m in door}
    assert not any(bad.values()), bad


@pytest.mark.parametrize("claims,other", [("checks/task", "audit.samples"), ("checks/samples", "audit.task")])
def test_a_door_s_claims_import_only_their_door(claims, other):
    for path in sorted((ROOT / claims).rglob("*.py")):
        bad = [t for t in imported(path, module_name(path)) if t == other or t.startswith(other + ".")]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for d in (*PACKAGES, "checks", "tests", "examples")
            for p in (ROOT / d).rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("package", sorted(ROOT_MODULES))
def test_package_roots_stay_short(package):
    modules = sorted(p.name for p in (ROOT / package).glob("*.py"))
    assert len(modules) <= ROOT_MODULES[package], f"{package}/ holds {len(modules)} modules: {modules}"
