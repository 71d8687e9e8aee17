"""The package's layout rules, checked on its source.

* No module imports another module's private (``_name``) names.
* No module reaches into a private attribute it does not define itself:
  ``obj._name`` is allowed on ``self``/``cls``, on a standard-library module,
  or when the same module defines ``_name`` (a function or class of that name,
  an assignment to ``self._name``/``cls._name``, a ``__slots__`` entry, or an
  assignment at module or class level).  That last allowance does not cover
  ``self.x._name`` where this module annotates ``self.x`` only with classes
  imported from other modules of the package (``self.client: Client | None``):
  a ``_name`` of its own (say ``_close``) does not make the other class's one
  ours.  An attribute without such an annotation is not judged by its type
  (the AST alone does not know it).
* Wire messages are built from their declarations in
  :mod:`distributed.protocol.messages`: no ``{"op": ...}`` literal (nor
  ``dict(op=...)``) outside ``distributed/protocol/``.
* Imports point down the layers that the README's "Architecture" section
  lists (read from it here, so the list stays true): a module imports from
  its own layer or a lower one, the scheduler side and the client side never
  import each other, and every module is in a layer.  Imports inside
  functions count; those under ``if TYPE_CHECKING:`` do not.
* No runtime import circle spans two packages, and no module is longer than
  :data:`MAX_MODULE_LINES` lines.

The checks run over every module of the package except its tests.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import distributed

PACKAGE = Path(distributed.__file__).parent
ROOT = PACKAGE.parent


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "tests" not in p.relative_to(PACKAGE).parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def private_imports(path: Path, tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        ours = node.level > 0 or (node.module or "").split(".")[0] == "distributed"
        if ours:
            for alias in node.names:
                if is_private(alias.name):
                    yield f"{where(path, node)}: from {'.' * node.level}{node.module or ''} import {alias.name}"


def stdlib_module_aliases(tree: ast.Module) -> set[str]:
    """Names bound to standard-library modules by ``import x`` / ``import x as y``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in sys.stdlib_module_names:
                    names.add(alias.asname or top)
    return names


def assigned_names(targets: list[ast.expr]) -> Iterator[str]:
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                yield node.id


def slots_entries(value: ast.expr) -> Iterator[str]:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        yield value.value
    elif isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        for elt in value.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                yield elt.value


def defined_names(tree: ast.Module) -> set[str]:
    """The names a module defines, in the sense of the module docstring."""
    defined: set[str] = set()
    # Module-level and class-level assignments (and ``__slots__`` entries).
    bodies: list[list[ast.stmt]] = [tree.body]
    bodies.extend(node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    for body in bodies:
        for stmt in body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign):
                targets, value = [stmt.target], stmt.value
            names = set(assigned_names(targets))
            defined |= names
            if "__slots__" in names and value is not None:
                defined.update(slots_entries(value))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            defined.add(node.attr)
    return defined


def imported_package_names(tree: ast.Module) -> set[str]:
    """Names bound by ``from distributed... import Name`` (or a relative import), type-checking ones included."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == "distributed"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def annotation_heads(annotation: ast.expr) -> Iterator[ast.expr]:
    """The types an annotation allows: ``A | B | None`` and ``Optional[A]`` give A, B (None), ``A[x]`` gives A."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        yield from annotation_heads(annotation.left)
        yield from annotation_heads(annotation.right)
    elif isinstance(annotation, ast.Subscript):
        if isinstance(annotation.value, ast.Name) and annotation.value.id == "Optional":
            yield from annotation_heads(annotation.slice)
        else:
            yield annotation.value
    elif isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        yield from annotation_heads(ast.parse(annotation.value, mode="eval").body)
    else:
        yield annotation


def foreign_attributes(tree: ast.Module) -> set[str]:
    """Attributes of ``self`` annotated (``self.x: T``) only with classes other modules of the package define.

    Their private members belong to those modules, even where this module
    happens to define a member of the same name (say its own ``_close``).
    """
    imported = imported_package_names(tree) - {
        node.name for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef))
    }
    verdicts: dict[str, bool] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Attribute)
            and isinstance(node.target.value, ast.Name)
            and node.target.value.id == "self"
        ):
            continue
        heads = [h for h in annotation_heads(node.annotation) if not (isinstance(h, ast.Constant) and h.value is None)]
        foreign = bool(heads) and all(isinstance(h, ast.Name) and h.id in imported for h in heads)
        attr = node.target.attr
        verdicts[attr] = verdicts.get(attr, True) and foreign
    return {attr for attr, foreign in verdicts.items() if foreign}


def private_reach_ins(path: Path, tree: ast.Module) -> Iterator[str]:
    defined = defined_names(tree)
    allowed_bases = {"self", "cls"} | stdlib_module_aliases(tree)
    foreign = foreign_attributes(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in allowed_bases:
            continue
        on_foreign = (
            isinstance(base, ast.Attribute)
            and isinstance(base.value, ast.Name)
            and base.value.id == "self"
            and base.attr in foreign
        )
        if on_foreign or node.attr not in defined:
            yield f"{where(path, node)}: {ast.unparse(node)}"


def op_dict_literals(path: Path, tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys):
                yield f"{where(path, node)}: {ast.unparse(node)[:80]}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and any(kw.arg == "op" for kw in node.keywords)
        ):
            yield f"{where(path, node)}: {ast.unparse(node)[:80]}"


# -- layers ------------------------------------------------------------------------------
#: The longest a module may be; past it, split it along a seam.
MAX_MODULE_LINES = 1500

#: Imports allowed against the layers: (importer, imported), each named once in the README.
ALLOWED_UPWARD = {("client.base", "deploy.local")}


@dataclass(frozen=True)
class Layer:
    """One entry of the README's layer list."""

    number: int
    side: str | None  # "scheduler" or "client" for the two sides of layer 4
    patterns: tuple[str, ...]


def read_layers(text: str) -> list[Layer]:
    """The layer list of the README's "Architecture" section: ``N. name: ``module`` ...`` entries."""
    section = text.split("\nArchitecture\n---", 1)[1].split("\n-------", 1)[0]
    layers: list[Layer] = []
    for entry in re.split(r"\n(?=\d+\. )|\n\n", section):
        head = re.match(r"(\d+)\. ([^:]*):", entry)
        if head is None:
            continue
        side = next((s for s in ("scheduler", "client") if f"the {s} side" in head.group(2)), None)
        layers.append(Layer(int(head.group(1)), side, tuple(re.findall(r"``([\w.*]+)``", entry[head.end() :]))))
    return layers


def module_name(path: Path) -> str:
    """``distributed/client/future.py`` -> ``client.future``; the package itself is ``distributed``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "distributed"


def layer_of(module: str, layers: list[Layer]) -> Layer | None:
    """The layer whose most specific pattern names ``module`` (an exact name beats any pattern)."""
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for pattern in layer.patterns:
            if pattern == module:
                rank = 10_000
            elif "*" in pattern and (fnmatch.fnmatchcase(module, pattern) or f"{module}.*" == pattern):
                rank = len(pattern.replace("*", ""))
            else:
                continue
            if best is None or rank > best[0]:
                best = (rank, layer)
    return best[1] if best else None


def type_checking_nodes(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (imports there are for annotations only)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                ids.update(id(n) for n in ast.walk(stmt))
    return ids


def runtime_imports(module: str, is_package: bool, tree: ast.Module, known: set[str]) -> Iterator[tuple[str, int]]:
    """The package's modules that ``module`` imports when it runs, with the line of each import."""
    skip = type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = ["distributed", *module.split(".")] if module != "distributed" else ["distributed"]
                if not is_package:
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            # ``from pkg import module`` imports the module (its package comes with any import);
            # ``from pkg import name`` imports the package's face.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}".removeprefix("distributed.") in known else base
                for alias in node.names
            ]
        for target in targets:
            if target != "distributed" and not target.startswith("distributed."):
                continue
            name = target.removeprefix("distributed.") if target != "distributed" else "distributed"
            if name in known and name != module:
                yield name, node.lineno


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """Module -> the modules it imports at run time -> the line of the first such import."""
    trees = {module_name(path): (path, tree) for path, tree in parsed()}
    known = set(trees)
    graph: dict[str, dict[str, int]] = {}
    for module, (path, tree) in trees.items():
        edges = graph.setdefault(module, {})
        for target, line in runtime_imports(module, path.name == "__init__.py", tree, known):
            edges.setdefault(target, line)
    return graph


def layer_breaches(graph: dict[str, dict[str, int]], layers: list[Layer]) -> Iterator[str]:
    """Imports that point up the layers or across the two sides, and modules in no layer."""
    for module in sorted(graph):
        if layer_of(module, layers) is None:
            yield f"{module}: in no layer of the README's list"
    for module, edges in sorted(graph.items()):
        here = layer_of(module, layers)
        if here is None:
            continue
        for target, line in sorted(edges.items()):
            there = layer_of(target, layers)
            if there is None or (module, target) in ALLOWED_UPWARD:
                continue
            if there.number > here.number:
                yield f"{module}:{line} imports {target}: layer {here.number} -> {there.number}"
            elif here.side and there.side and here.side != there.side:
                yield f"{module}:{line} imports {target}: the {here.side} side -> the {there.side} side"
            elif there.number == here.number and there.side and not here.side:
                yield f"{module}:{line} imports {target}: a module of neither side -> the {there.side} side"


def package_of(module: str, graph: dict[str, dict[str, int]]) -> str:
    """The package ``module`` belongs to: itself for a package's ``__init__``."""
    if any(other.startswith(f"{module}.") for other in graph):
        return module
    return module.rpartition(".")[0] if "." in module else "distributed"


def import_circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


@functools.cache
def parsed() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((path, ast.parse(path.read_text(), filename=str(path))) for path in package_modules())


def test_the_checks_see_the_whole_package() -> None:
    modules = {str(p.relative_to(PACKAGE)) for p in package_modules()}
    for expected in ("core.py", "scheduler/server.py", "worker/server.py", "utils_test.py", "protocol/messages.py"):
        assert expected in modules
    assert any(m.startswith("client/") for m in modules)
    assert not any(m.startswith("tests/") for m in modules)


def test_no_private_imports_across_modules() -> None:
    offenders = [line for path, tree in parsed() for line in private_imports(path, tree)]
    assert not offenders, "\n".join(offenders)


def test_no_reaching_into_private_attributes() -> None:
    offenders = [line for path, tree in parsed() for line in private_reach_ins(path, tree)]
    assert not offenders, "\n".join(offenders)


def test_messages_are_built_in_protocol_only() -> None:
    protocol = PACKAGE / "protocol"
    offenders = [
        line for path, tree in parsed() if protocol not in path.parents for line in op_dict_literals(path, tree)
    ]
    assert not offenders, "\n".join(offenders)


def test_imports_point_down_the_layers() -> None:
    layers = read_layers((ROOT / "README.rst").read_text())
    assert {layer.number for layer in layers} == set(range(1, 8))
    breaches = list(layer_breaches(import_graph(), layers))
    assert not breaches, "\n".join(breaches)


def test_no_import_circle_spans_two_packages() -> None:
    # The one allowed upward import runs only when called (a function-level import), after both ends loaded.
    graph = {
        module: {target: line for target, line in edges.items() if (module, target) not in ALLOWED_UPWARD}
        for module, edges in import_graph().items()
    }
    spanning = [group for group in import_circles(graph) if len({package_of(m, graph) for m in group}) > 1]
    assert not spanning, "\n".join(" ".join(group) for group in spanning)


def test_no_module_is_too_long() -> None:
    lengths = {module_name(path): len(path.read_text().splitlines()) for path in package_modules()}
    too_long = {module: n for module, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not too_long, too_long


def test_tests_catch_logs_with_a_handler_of_their_own() -> None:
    # ``caplog`` sees this package's records only on pytest releases that attach to loggers which do not
    # propagate, and then only when the logger did not propagate as the test began: distributed.tests.logs.
    tests = PACKAGE / "tests"
    users = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        for path in sorted(tests.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(arg.arg == "caplog" for arg in node.args.args + node.args.kwonlyargs)
    ]
    assert not users, "\n".join(users)


# -- the checks themselves catch what they must ------------------------------------------
SAMPLE = """
import os as operating_system
from distributed.core import _hidden, public
from . import _relative
import numpy as np

_MODULE_LEVEL = 1


class Holder:
    __slots__ = ("_slot",)
    _class_level: int = 0

    def __init__(self) -> None:
        self._own = 1
        self._slot = 2

    def _method(self) -> None:
        pass


def use(other: Holder, s: object) -> None:
    other._own, other._slot, other._class_level, other._method(), other._MODULE_LEVEL
    operating_system._exit
    self_ish = other
    self_ish.__dict__
    s._private_of_another_module
    s.scheduler._worker_by_name
    np._internal
    msg = {"op": "compute", "key": 1}
    msg2 = dict(op="compute")
    fine = {"status": "OK"}
"""


@pytest.fixture
def sample() -> tuple[Path, ast.Module]:
    return ROOT / "sample.py", ast.parse(SAMPLE)


def test_checks_find_private_imports(sample: tuple[Path, ast.Module]) -> None:
    found = list(private_imports(*sample))
    assert len(found) == 2
    assert "import _hidden" in found[0] and "import _relative" in found[1]


def test_checks_find_private_reach_ins(sample: tuple[Path, ast.Module]) -> None:
    found = [line.split(": ", 1)[1] for line in private_reach_ins(*sample)]
    assert sorted(found) == ["np._internal", "s._private_of_another_module", "s.scheduler._worker_by_name"]


def test_checks_find_op_dicts(sample: tuple[Path, ast.Module]) -> None:
    found = list(op_dict_literals(*sample))
    assert len(found) == 2
    assert "'op': 'compute'" in found[0] and "dict(op='compute')" in found[1]


FOREIGN_SAMPLE = """
from distributed.client import Client


class Holder:
    def __init__(self, client: Client) -> None:
        self.client: Client | None = client
        self.local: Holder | None = None
        self.either: Holder | Client | None = None

    async def _close(self) -> None:
        await self.client._close()
        await self.local._close()
        await self.either._close()
"""


def test_checks_find_private_members_of_another_modules_class_on_self() -> None:
    found = [line.split(": ", 1)[1] for line in private_reach_ins(ROOT / "sample.py", ast.parse(FOREIGN_SAMPLE))]
    # Holder defines _close too, yet the client's _close is Client's; Holder's own (and a maybe-Holder) pass.
    assert found == ["self.client._close"]


LAYERS_SAMPLE = """
Architecture
------------

Text before the list.

1. leaves: ``protocol.*`` ``utils``
2. transport: ``core``
4. the scheduler side: ``scheduler.*``
4. the client side: ``client.*``
7. faces: ``distributed``

After the list.

Develop
-------
"""


def test_checks_read_the_layer_list() -> None:
    layers = read_layers(LAYERS_SAMPLE)
    assert [(layer.number, layer.side) for layer in layers] == [
        (1, None),
        (2, None),
        (4, "scheduler"),
        (4, "client"),
        (7, None),
    ]
    assert layer_of("protocol", layers) is layers[0] and layer_of("protocol.messages", layers) is layers[0]
    assert layer_of("scheduler.state", layers) is layers[2]
    assert layer_of("worker", layers) is None


def test_checks_find_layer_breaches_and_circles() -> None:
    layers = read_layers(LAYERS_SAMPLE)
    graph = {
        "utils": {"core": 3},  # a leaf importing transport
        "core": {"protocol.messages": 1},
        "protocol.messages": {},
        "scheduler.state": {"client.future": 5, "core": 2},  # across the sides
        "client.future": {"distributed": 9},  # up to the faces
        "distributed": {"scheduler.state": 1, "client.future": 1},
        "worker": {},  # in no layer
    }
    found = list(layer_breaches(graph, layers))
    assert found == [
        "worker: in no layer of the README's list",
        "client.future:9 imports distributed: layer 4 -> 7",
        "scheduler.state:5 imports client.future: the scheduler side -> the client side",
        "utils:3 imports core: layer 1 -> 2",
    ]
    circles = import_circles(graph)
    assert circles == [["client.future", "distributed", "scheduler.state"]]
