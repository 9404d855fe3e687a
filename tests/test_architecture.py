"""docs/architecture.md is the source of truth, and the code and tests keep to it.

- no module imports a layer above its own (the layer table is read from the document);
- every `test_invariant_N_*` names an invariant written there, and every invariant
  written there has a test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src"
TESTS = ROOT / "tests"


# -- layers ------------------------------------------------------------------------


def layer_table(text: str) -> dict[str, int]:
    """`| 5 | runtime | `tether.engine.runtime`, ... |` rows: module prefix -> layer number."""
    prefixes: dict[str, int] = {}
    for line in text.splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|[^|]*\|(.*)\|\s*$", line)
        if row is None:
            continue
        for module in re.findall(r"`([\w.]+)`", row.group(2)):
            assert module not in prefixes, f"{module} is given two layers"
            prefixes[module] = int(row.group(1))
    return prefixes


def layer_of(module: str, prefixes: dict[str, int]) -> int | None:
    """The layer of the most specific prefix that covers `module`.

    The root package (`tether`, the public re-exports) covers itself only: a new module
    must be placed explicitly.
    """
    best: tuple[int, int] | None = None
    for prefix, layer in prefixes.items():
        covers = module == prefix or ("." in prefix and module.startswith(prefix + "."))
        if covers and (best is None or len(prefix) > best[0]):
            best = (len(prefix), layer)
    return best[1] if best else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(module: str) -> bool:
    return (SRC / module.replace(".", "/") / "__init__.py").exists()


def is_module(module: str) -> bool:
    base = SRC / module.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, *, annotations: bool = False) -> list[tuple[int, str]]:
    """(line, module) for each tether module imported at run time (lazily included), and
    with `annotations` those imported under `if TYPE_CHECKING:` too."""
    module = module_name(path)
    package = module if is_package(module) else module.rpartition(".")[0]
    skip: set[int] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not annotations and isinstance(node, ast.If) and _type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # `from tether import faults` imports the module tether.foundation.faults.
                sub = f"{source}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else source))
    return [(line, name) for line, name in found if name.split(".")[0] == "tether"]


def test_no_module_imports_a_layer_above_its_own() -> None:
    prefixes = layer_table(DOC.read_text())
    assert len(set(prefixes.values())) >= 6, "the layer table was not found in the document"
    unplaced, upward = [], []
    for path in sorted((SRC / "tether").rglob("*.py")):
        module = module_name(path)
        if module.startswith("tether._proto"):
            continue  # generated code
        mine = layer_of(module, prefixes)
        if mine is None:
            unplaced.append(module)
            continue
        for line, imported in imports_of(path):
            theirs = layer_of(imported, prefixes)
            if theirs is None:
                unplaced.append(imported)
            elif theirs > mine:
                upward.append(f"{module}:{line} imports {imported} (layer {theirs} > {mine})")
    assert unplaced == [], "modules without a layer in docs/architecture.md"
    assert upward == []


def test_the_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    # The check itself can fail: the store importing the runtime is refused.
    prefixes = layer_table(DOC.read_text())
    store, runtime = (
        layer_of("tether.store.sqlite", prefixes),
        layer_of("tether.engine.runtime", prefixes),
    )
    assert store is not None and runtime is not None and runtime > store
    writer = layer_of("tether.engine.writer", prefixes)
    assert writer != layer_of("tether.engine.runtime", prefixes)
    assert layer_of("tether.somewhere_new", prefixes) is None
    assert imports_of(SRC / "tether" / "engine" / "writer.py")  # imports are seen at all
    assert "tether.foundation.faults" in {
        m for _, m in imports_of(SRC / "tether" / "engine" / "writer.py")
    }


def import_graph(*, annotations: bool) -> dict[str, set[str]]:
    """Module -> the tether modules it imports (generated code left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((SRC / "tether").rglob("*.py")):
        module = module_name(path)
        if not module.startswith("tether._proto"):
            found = {m for _, m in imports_of(path, annotations=annotations)}
            graph[module] = {m for m in found if m != module and not m.startswith("tether._proto")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles: strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            circle = set()
            while (w := stack.pop()) != v:
                circle.add(w)
            if circle:
                found.append(circle | {v})

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back_at_run_time() -> None:
    assert circles(import_graph(annotations=False)) == []


def test_no_import_circle_crosses_a_layer_even_through_annotations() -> None:
    prefixes = layer_table(DOC.read_text())
    crossing = [
        sorted(circle)
        for circle in circles(import_graph(annotations=True))
        if len({layer_of(m, prefixes) for m in circle}) > 1
    ]
    assert crossing == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]


# -- invariants --------------------------------------------------------------------


def invariants(text: str) -> dict[int, str]:
    """The numbered list under `## Invariants`: number -> title."""
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return {int(n): title for n, title in re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, re.M)}


def invariant_tests() -> dict[str, int]:
    """Every `test_invariant_N_*` under tests/ (functions and files): name -> N."""
    named: dict[str, int] = {}
    for path in TESTS.rglob("*.py"):
        if m := re.match(r"test_invariant_(\d+)", path.stem):
            named[str(path.relative_to(ROOT))] = int(m.group(1))
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if m := re.match(r"test_invariant_(\d+)", fn.name):
                named[f"{path.relative_to(ROOT)}::{fn.name}"] = int(m.group(1))
    return named


def test_every_invariant_test_names_a_written_invariant() -> None:
    written = invariants(DOC.read_text())
    assert sorted(written) == list(range(1, len(written) + 1)), "invariants are numbered 1..n"
    named = invariant_tests()
    unknown = {name: n for name, n in named.items() if n not in written}
    assert unknown == {}, "tests name invariants that docs/architecture.md does not define"
    untested = sorted(set(written) - set(named.values()))
    assert untested == [], "invariants without a test_invariant_N_* test"


def test_the_invariant_parser_reads_the_document() -> None:
    written = invariants(DOC.read_text())
    assert written[1] == "Only a recorded node is done."
    assert written[4] == "Appends are idempotent and fenced."
    assert len(written) == 12
    assert invariants("## Invariants\n\n1. **One.**\n2. **Two.**\n\n## Next\n3. **No.**") == {
        1: "One.",
        2: "Two.",
    }
