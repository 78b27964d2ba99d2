"""No import cycle between the agent's modules, function-level imports included.

The agent imports lazily on purpose (a cheap `import`, nothing heavy on the
program's thread), so most of its imports of its own modules sit inside
functions, where Python never complains about a cycle. A cycle there still
ties modules together that should not know each other, and an import that
runs for the first time under an unusual call order may meet a half-built
module. This test parses every module with `ast`, takes every import of a
sibling module wherever it is written (module level, functions, methods,
conditionals; `from . import x`, `from .x import y`, `import
probing_mcp_agent.x`, `__import__`/`importlib.import_module` with a literal
name, and activation's `_optional("x", ...)`), and fails naming each cycle.
A dynamic import whose name is computed must have its targets declared in
DYNAMIC below, where they count as edges too.
"""
import ast
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_DIR = os.path.join(os.path.dirname(HERE), "probing_mcp_agent")
PKG = "probing_mcp_agent"

# Helpers that import a sibling named by their first argument (a string).
_IMPORTING_HELPERS = ("_optional",)

# Modules with an import whose name is computed, and the siblings it can
# name (edges of the graph like any other).
DYNAMIC = {
    "activation": set(),  # _optional() itself: each call names its module (_IMPORTING_HELPERS)
    "recorders": {"steptiming", "collectives", "spans"},  # start(): each recorder's install()
}


def _literal(node):
    """The string a node evaluates to when it is a literal, or a literal
    tail of a concatenation (`__package__ + ".tables"`); else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        tail = _literal(node.right)
        if tail is not None and tail.startswith("."):
            return tail
    return None


def _sibling(dotted, pkg, modules):
    """The sibling module an absolute or relative dotted name names, or None."""
    if dotted.startswith("."):
        dotted = dotted.lstrip(".")
    elif dotted == pkg or dotted.startswith(pkg + "."):
        dotted = dotted[len(pkg) + 1:]
    else:
        return None
    first = dotted.split(".", 1)[0]
    return first if first in modules else None


def module_imports(path, pkg, modules):
    """({sibling: first line} of every import of a sibling module in a file,
    [lines of the dynamic imports whose name is computed])."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    dynamic = []

    def add(name, node):
        if name is not None and name not in found:
            found[name] = node.lineno

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from .x import y / from .. (none here)
                if node.module:
                    add(_sibling("." + node.module, pkg, modules), node)
                else:
                    for a in node.names:
                        add(a.name if a.name in modules else None, node)
            elif node.module == pkg:
                for a in node.names:
                    add(a.name if a.name in modules else None, node)
            elif node.module:
                add(_sibling(node.module, pkg, modules), node)
        elif isinstance(node, ast.Import):
            for a in node.names:
                add(_sibling(a.name, pkg, modules), node)
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if fname not in ("__import__", "import_module") + _IMPORTING_HELPERS:
                continue
            arg = _literal(node.args[0])
            if arg is None:
                dynamic.append(node.lineno)
            elif fname in _IMPORTING_HELPERS:
                add(arg if arg in modules else None, node)
            else:
                add(_sibling(arg, pkg, modules), node)
    return found, dynamic


def import_graph(pkg_dir, pkg, dynamic=None):
    """{module: {sibling: line}} over the package's .py files (the
    package's __init__ is the module named `__init__`), with the targets
    `dynamic` ({module: siblings}) declares for computed imports (line 0).
    Raises AssertionError naming a computed import not declared there."""
    dynamic = dynamic or {}
    modules = sorted(n[:-3] for n in os.listdir(pkg_dir) if n.endswith(".py"))
    names = set(modules)
    graph, undeclared = {}, []
    for m in modules:
        edges, computed = module_imports(os.path.join(pkg_dir, m + ".py"), pkg, names)
        if computed and m not in dynamic:
            undeclared.extend("%s.py:%d" % (m, n) for n in computed)
        for t in dynamic.get(m, ()):
            edges.setdefault(t, 0)
        edges.pop(m, None)
        graph[m] = edges
    assert not undeclared, ("imports whose module name is computed: declare the modules each can import "
                            "(DYNAMIC in test_core_imports.py): %s" % ", ".join(undeclared))
    return graph


def find_cycles(graph):
    """The strongly connected components with more than one module (Tarjan),
    each as a sorted list, plus, for each, one concrete cycle through it as a
    list of modules [a, b, ..., a]."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                comps.append(sorted(comp))

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)

    out = []
    for comp in sorted(comps):
        members = set(comp)
        start = comp[0]
        # shortest way back to start inside the component (BFS)
        prev, frontier, seen, path = {}, [start], {start}, None
        while frontier and path is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w not in members:
                        continue
                    if w == start:
                        path = [w]
                        x = v
                        while x != start:
                            path.append(x)
                            x = prev[x]
                        path.append(start)
                        path.reverse()
                        break
                    if w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if path is not None:
                    break
            frontier = nxt
        out.append((comp, path))
    return out


def describe(graph, cycles):
    lines = []
    for comp, path in cycles:
        lines.append("cycle among %s: %s" % (", ".join(comp), " -> ".join(
            "%s%s" % (m, "" if i == len(path) - 1 else " (line %d)" % graph[m][path[i + 1]]
                      if graph[m][path[i + 1]] else " (computed, DYNAMIC)")
            for i, m in enumerate(path))))
    return "\n".join(lines)


def test_agent_has_no_import_cycle():
    graph = import_graph(PKG_DIR, PKG, DYNAMIC)
    # it did parse the package, function-level imports included (server imports fr in a handler)
    assert len(graph) > 10 and "runtime" in graph["activation"] and "fr" in graph["server"]
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in %s (function-level imports count):\n%s" % (PKG, describe(graph, cycles))


def _write_pkg(root, files):
    d = os.path.join(str(root), "pkgx")
    os.makedirs(d)
    for name, text in files.items():
        with open(os.path.join(d, name + ".py"), "w") as f:
            f.write(text)
    return d


def test_cycle_finder_reports_a_function_level_cycle(tmp_path):
    d = _write_pkg(tmp_path, {
        "__init__": "",
        "a": "from . import b\n",
        "b": "def f():\n    from .c import thing\n    return thing\n",
        "c": "class K:\n    def m(self):\n        import pkgx.a\n",
        "leaf": "import os\n",
        "d": "from . import leaf\n",
    })
    graph = import_graph(d, "pkgx")
    assert graph["a"] == {"b": 1} and graph["b"] == {"c": 2} and graph["c"] == {"a": 3}
    cycles = find_cycles(graph)
    assert [c for c, _ in cycles] == [["a", "b", "c"]]
    msg = describe(graph, cycles)
    assert "a (line 1) -> b (line 2) -> c (line 3) -> a" in msg, msg


def test_cycle_finder_sees_dynamic_and_absolute_forms(tmp_path):
    d = _write_pkg(tmp_path, {
        "__init__": "def go():\n    from pkgx import a\n",
        "a": "def f():\n    return __import__(__package__ + '.b', fromlist=['x'])\n",
        "b": "def g():\n    _optional('a', 'start')\n",
        "c": "import importlib\nimportlib.import_module('pkgx.a')\nfrom pkgx.b import g\n",
        "d": "def h(name):\n    return __import__('pkgx.' + name)\n",
    })
    with pytest.raises(AssertionError, match=r"d\.py:2"):
        import_graph(d, "pkgx")
    graph = import_graph(d, "pkgx", {"d": {"c"}})
    assert graph["__init__"] == {"a": 2} and graph["d"] == {"c": 0}
    assert graph["a"] == {"b": 2} and graph["b"] == {"a": 2} and graph["c"] == {"a": 2, "b": 3}
    assert [c for c, _ in find_cycles(graph)] == [["a", "b"]]
    graph["c"]["d"] = 0  # a declared computed import closes a cycle too
    assert [c for c, _ in find_cycles(graph)] == [["a", "b"], ["c", "d"]]


def test_cycle_finder_passes_an_acyclic_package(tmp_path):
    d = _write_pkg(tmp_path, {"__init__": "", "a": "from . import b\n", "b": "import os\nfrom os import path\n"})
    assert find_cycles(import_graph(d, "pkgx")) == []
