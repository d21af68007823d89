"""The package's import graph: no cycles (a layer uses only the layers below it) and no module
importing another module's underscore names (each module's private parts stay its own). Both read
the source, function-level imports included, so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "acceptance"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, path: Path, modules: dict) -> list[tuple[str, str]]:
    """(imported module, imported name or "") of every acceptance import in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "acceptance":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub, "") if sub in modules else (target, alias.name))
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] == "acceptance"]
    return out


def _graph():
    modules = _modules()
    return modules, {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_another_modules_private_names():
    _, graph = _graph()
    private = [(name, target, what) for name, imports in graph.items() for target, what in imports
               if what.startswith("_") and not (what.startswith("__") and what.endswith("__"))]
    assert private == [], "\n".join(f"{n} imports {t}.{w}" for n, t, w in private)


def test_the_import_graph_has_no_cycle():
    modules, graph = _graph()
    edges = {n: {t for t, _ in imports if t in modules and t != n} for n, imports in graph.items()}
    # A package's __init__ re-exports its modules: an edge into a package is an edge into what it
    # imports, which is where a cycle would close.
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


# The packages by layer, bottom first (docs/testing.md, "Layout"): a module imports only from its own layer and
# the ones below. acceptance/__init__ holds only the version.
LAYERS = (("acceptance", "records", "measure"), ("host", "switchtree"), ("rules",), ("checks",), ("runtime",),
          ("engines",), ("tools",),
          ("drivers",), ("analysis",), ("history",), ("report", "export"), ("cli",), ("__main__",))


def _layer(module: str, modules: dict) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "acceptance"
    if len(parts) == 2 and modules[module].name != "__init__.py" and top != "__main__":
        top = "acceptance"  # a module directly in acceptance/ (there are none besides __main__)
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_a_layer_uses_only_the_layers_below_it():
    modules, graph = _graph()
    assert {m.split(".")[1] for m in modules if "." in m} <= {n for names in LAYERS for n in names}, \
        "a package that LAYERS does not place"
    upward = sorted({(name, target) for name, imports in graph.items() for target, _ in imports
                     if target in modules and _layer(target, modules) > _layer(name, modules)})
    assert upward == [], "imports of a higher layer:\n" + "\n".join(f"{n} imports {t}" for n, t in upward)


def test_the_map_in_docs_testing_names_every_module_in_the_layers_order():
    """docs/testing.md's Layout block: one entry per package folder, top layer first, naming each of the
    package's modules, so a newcomer's map is never out of date."""
    import re
    doc = (ROOT / "docs" / "testing.md").read_text()
    block = doc[doc.index("## Layout"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"acceptance/(\w+)/", line)
        if m:
            current = m[1]
            entries[current] = ""
        if current:
            entries[current] += line + "\n"
    packages = [p.name for p in (ROOT / "acceptance").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert sorted(entries) == sorted(packages)
    modules = _graph()[0]
    layer = [_layer(f"acceptance.{name}", modules) for name in entries]
    assert layer == sorted(layer, reverse=True), f"not top layer first: {list(entries)}"
    unnamed = {pkg: [m.stem for m in sorted((ROOT / "acceptance" / pkg).rglob("*.py"))
                     if m.stem != "__init__" and not re.search(rf"\b{m.stem}\b", entries[pkg])]
               for pkg in entries}
    assert {k: v for k, v in unnamed.items() if v} == {}, "modules docs/testing.md's map does not name"


def test_engines_declare_what_they_offer_and_have_it():
    """Engines are classes registered by name (registry.register), one instance per process. What an
    engine can do is declared (OFFERS), from the one list of operations, and true: each offered
    operation is there, each PairLink and IncastGroup has its Protocol's methods, every engine has
    the Engine Protocol's, and every operation a catalog suite needs is offered by some engine."""
    import importlib
    import inspect
    import typing

    from acceptance.rules import catalog
    from acceptance.engines import contract, registry

    def members(protocol):
        return [m for m in dir(protocol) if not m.startswith("_") and callable(getattr(protocol, m))]

    offered = set()
    for name in registry.BUILT:
        module = importlib.import_module(f"acceptance.engines.{name}")
        engine = registry.engine(name)
        assert type(engine) is registry.ENGINES[name] and type(engine).__module__.startswith(module.__name__)
        assert engine.NAME == name and engine.OFFERS <= contract.OPERATIONS, name
        assert engine.CAN <= contract.CAPABILITIES, name
        if "PairLink" in engine.OFFERS:  # gpu_memory is the PairLink that takes memory=, and only it
            takes = "memory" in inspect.signature(getattr(engine, "PairLink")).parameters
            assert takes == ("gpu_memory" in engine.CAN), name
        assert registry.engine(name) is engine  # one per process: its set-up is kept there
        assert all(callable(getattr(engine, m, None)) for m in members(contract.Engine)), name
        for op in engine.OFFERS:
            assert hasattr(engine, op), (name, op)
        for op in contract.OPERATIONS - engine.OFFERS:
            assert not hasattr(engine, op), f"{name} has {op} but does not offer it"
        for role in ("PairLink", "IncastGroup"):
            if role in engine.OFFERS:
                made = getattr(engine, role)  # the class, or a method that makes one
                if not inspect.isclass(made):
                    made = typing.get_type_hints(made)["return"]
                assert all(callable(getattr(made, m, None)) for m in members(getattr(contract, role))), (name, role)
        offered |= engine.OFFERS
    assert {n for s in catalog.SUITES.values() for n in s.engine_needs} <= offered


# Rooms a person can hold (issue 43): no module over MAX_MODULE lines, and a function over MAX_FUNCTION
# lines says why beside it, in a comment right above its def that starts "# Long:".
MAX_MODULE, MAX_FUNCTION = 800, 80


def test_no_module_too_long_and_every_long_function_says_why():
    too_long, unexplained = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        rel = path.relative_to(ROOT)
        if len(lines) > MAX_MODULE:
            too_long.append(f"{rel}: {len(lines)} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                above = first - 2  # 0-based index of the line above the def (or its first decorator)
                while above >= 0 and lines[above].lstrip().startswith("#") \
                        and not lines[above].lstrip().startswith("# Long:"):
                    above -= 1
                if above < 0 or not lines[above].lstrip().startswith("# Long:"):
                    unexplained.append(f"{rel}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert too_long == [], f"modules over {MAX_MODULE} lines: split them by concern"
    assert unexplained == [], (f"functions over {MAX_FUNCTION} lines with no '# Long: why' comment above "
                               f"them: split them, or say why not")
