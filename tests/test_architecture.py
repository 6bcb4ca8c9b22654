"""The house's import graph, drawn from the source with `ast` (nothing is imported).

What counts as an import of module A by module B: every `import` / `from ... import` statement in
B wherever it stands (module level, inside a function or class body, under `if TYPE_CHECKING:`),
and `importlib.import_module("a.literal")`. `from pkg import name` is an import of `pkg.name`
when that is a module of the project, else of `pkg`. Importing `a.b.c` is an edge to `a.b.c` only
(not to the packages above it, which Python runs first but which name nothing back).

For the direction between folders, a registry's lazy `"module:attr"` targets (devices, adapters)
count too: a plug-in named by string is still a dependency. For circles they do not: a registry
that names its plug-ins by string, and plug-ins that ask the registry for another plug-in, do not
import each other when either is imported.

Rules (docs/architecture.md, the design card): no circle anywhere in the seven folders, nor
between the parts of a folder (its sub-folders and top-level modules);
`sweep` -> `runners` -> `model_configs` -> `ground`, and `sweep` -> `sizing` -> `model_configs`;
everything may use `ground`, which uses none of the others; `reports` (the reading side) uses
only `ground` and the stage declarations (the stage registry and each group's declaration,
which import only `ground`), and nothing below the sweep uses `reports`; `dashboard` imports
only `reports` and `ground` (and only the CLI, in `sweep`, imports `dashboard`, to serve it).
A stage group is one package, `runners/stages/<group>/`: its declaration in its `__init__.py`,
named by one registry entry; no file outside `runners/stages/` declares a stage (its group,
needs, help: `StageDecl`, a hand-written tuple of stages, a `*_STAGES` table).
A library is one package, `model_configs/libraries/<name>/`: only the registry names it (a lazy
target), another library's package imports it only where `LIBRARY_DEPENDENCIES` says why, and
the library's own Python package is imported only inside it (and where `IMPORTS_LIBRARY` says why).
Sizing is one package, `sizing/`: it asks the adapter what only the library knows (no library
config field named in it, no library imported), and reads each device's hardware figures by
path from the device's folder, the only place they are.
A device is one folder, `runners/devices/<name>/`: what only it knows (its `knowledge` and its
options' flags) is in no product file outside that folder (a text search of code, data and
templates, not an import rule: this one imports the device registry).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("sweep", "runners", "sizing", "model_configs", "reports", "dashboard", "ground")
# Which folders each folder may import from (besides itself).
MAY_IMPORT = {
    "sweep": {
        "runners",
        "sizing",
        "model_configs",
        "reports",
        "dashboard",
        "ground",
    },  # serves the dashboard
    "runners": {"model_configs", "ground"},
    "sizing": {"model_configs", "ground"},  # a device's hardware figures: read by path
    "model_configs": {"ground"},
    "reports": {"ground", "runners.stages"},  # the stage declarations only (stage_declarations())
    "dashboard": {"reports", "ground"},
    "ground": set(),
}
# Edges of the circle another engineer removes (issue 18), allowed until it merges.
# Whoever merges them deletes the entry (`test_known_edges_still_exist` says when).
KNOWN_EDGES: set[tuple[str, str]] = {}
# The one plug-in package that may name its device in code, and the modules outside it that may,
# each with why. Prose (docstrings, comments, messages and help text with spaces) is not code.
DEVICE_PACKAGE = "runners/devices/neuron/"
NAMES_NEURON = {
    "runners/devices/__init__.py": "the device registry names the package it loads",
}
# The library packages: each is one folder under LIBRARIES, named by one registry entry.
LIBRARIES = "model_configs/libraries/"
REGISTRY = "model_configs.libraries"
# A library package that builds on another's code, each with why.
LIBRARY_DEPENDENCIES = {
    ("open_clip", "timm"): "a timm trunk in open_clip's vision tower shrinks and builds as timm's",
    ("sentence_transformers", "transformers"): "the stack's backbone is a transformers model",
    ("single_file", "diffusers"): "a single-file checkpoint is a diffusers class: after resolving, "
    "everything is the diffusers adapter's",
}
# Where a library's own Python package is imported outside its library package (a module, or
# another library package), with why.
IMPORTS_LIBRARY = {
    ("chronos", "transformers"): "Chronos and Chronos-Bolt are transformers T5 models",
    ("transformers", "timm"): "the timm-backed families' towers are timm models",
    ("runners/quiet.py", "transformers"): "quiets its logging in every model process",
    ("runners/quiet.py", "diffusers"): "quiets its logging where it is already imported",
    ("model_configs/config_files.py", "transformers"): "a config mapping to repo code is refused "
    "before any library is chosen (transformers knows which model types are its own)",
    ("runners/stages/hf_training/trainers.py", "transformers"): "the hf_training stages train "
    "through "
    "transformers' own Trainer and TrainingArguments (what they test), inside the stages only",
}
# Sizing: one package, the hardware figures in the device folders.
SIZING = "sizing/"
HARDWARE_FILE = "hardware.json"
# The sizing modules outside `sizing/`, each with why: the contract and the reading side.
SIZING_ELSEWHERE = {
    "ground/sizing_columns.py": "the contract of what a model's summary row holds of the sizing "
    "table, which the reading side (reports/, ground/fmt.py) reads and may not import sizing/ for",
    "reports/sizing.py": "the reading side: the sizing table read back",
    "reports/render/sizing.py": "the reading side: a model's sizing rows as text",
}
# Config fields and methods only a library knows (what its adapter's `attention_layout` and
# `lora_targets` read): never named in the sizing package.
LIBRARY_FIELDS = frozenset(
    {
        "get_text_config",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "num_layers",
        "head_dim",
        "qk_head_dim",
        "v_head_dim",
        "layer_types",
        "use_sliding_window",
        "attention_chunk_size",
        "model_type",
        "get_output_embeddings",
        "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING",
    }
)
_NEURON = re.compile(
    r"(?i)(?<![a-z])neuron(?!s)"
)  # neuron, neuron-emulated, torch_neuronx; not neurons
_LAZY_TARGET = re.compile(rf"({'|'.join(FOLDERS)})(\.\w+)+:\w+")


def project_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    modules = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if package else parts)] = (path, package)
    return modules


def _owner(name: str, modules: dict) -> str | None:
    """The project module an import of `name` runs (the longest prefix that is a module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def _edges() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """module -> (the project modules it imports, those its lazy registry targets name)."""
    modules = project_modules()
    edges = {}
    for module, (path, package) in modules.items():
        here = module if package else module.rpartition(".")[0]
        names: list[str] = []
        lazy: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    names.append(full if full in modules else source)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.append(node.args[0].value)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _LAZY_TARGET.fullmatch(node.value)
            ):
                lazy.append(node.value.split(":")[0])
        found = [{_owner(n, modules) for n in group} - {None, module} for group in (names, lazy)]
        edges[module] = (frozenset(found[0]), frozenset(found[1]))  # type: ignore[arg-type]
    return edges


def import_graph(*, lazy: bool = False) -> dict[str, frozenset[str]]:
    """module -> the project modules it imports (see the module docstring for what counts);
    with `lazy`, also the modules its registry strings name."""
    return {m: (e | z if lazy else e) for m, (e, z) in _edges().items()}


def circles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: no recursion limit on a deep graph
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _without_known(graph: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
    return {a: {b for b in bs if (a, b) not in KNOWN_EDGES} for a, bs in graph.items()}


def test_no_import_circles():
    found = circles(_without_known(import_graph()))
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def part_circles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Import circles between the parts of each folder: a module stands for its part (the
    folder's sub-folder it is in, else itself), so `reports.render.text` importing
    `reports.coverage` and `reports.coverage` importing `reports.render.fmt` is a circle
    `reports.coverage <-> reports.render` (bench/house.py counts them too)."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = part(module)
        parts.setdefault(here, set()).update(
            part(t) for t in targets if part(t) != here and t.split(".")[0] == here.split(".")[0]
        )
    return circles(parts)


def test_no_import_circles_between_a_folders_parts():
    """A folder's sub-folders and top-level modules import one another one way: the devices'
    folder does not import the supervisor that starts their children (the device check is
    `runners/preflight.py`), the adapters read the bundled catalog from a module that does not
    fetch from the Hub (`model_configs/catalog_refresh.py`)."""
    found = part_circles(import_graph())
    assert found == [], "circles between a folder's parts:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def _may_import(a: str, b: str) -> bool:
    """Whether module `a` may import module `b` by the folders' rules (`MAY_IMPORT`; an entry
    that names a module, such as `runners.stages`, allows the stage declarations only)."""
    here, there = a.split(".")[0], b.split(".")[0]
    if here == there or there in MAY_IMPORT[here]:
        return True
    return any(
        "." in allowed and allowed == "runners.stages" and b in stage_declarations()
        for allowed in MAY_IMPORT[here]
    )


def test_imports_flow_one_way_between_folders():
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in import_graph(lazy=True).items()
        for b in targets
        if not _may_import(a, b)
    )
    assert wrong == [], "imports against the flow:\n" + "\n".join(wrong)


def test_only_the_cli_imports_the_dashboard():
    importers = sorted(
        a
        for a, targets in import_graph(lazy=True).items()
        if not a.startswith("dashboard") and any(b.startswith("dashboard") for b in targets)
    )
    assert importers == ["sweep.commands.dashboard"]


def test_known_edges_still_exist():
    """An allowance outlives its edge only until the merge that removes it: then delete it."""
    graph = import_graph()
    gone = sorted(f"{a} -> {b}" for a, b in KNOWN_EDGES if b not in graph.get(a, ()))
    assert gone == [], "delete these from KNOWN_EDGES, the edge is gone:\n" + "\n".join(gone)


def test_the_graph_sees_imports_of_every_kind():
    """The graph reader itself: a module-level, a function-level, a TYPE_CHECKING and a
    relative import are each an edge (else the tests above would pass on a blind reader)."""
    graph = import_graph()
    assert "ground.schema" in graph["model_configs.resolve"]  # module level
    assert "model_configs.libraries" in graph["model_configs.resolve"]  # inside a function
    assert "model_configs.libraries.base" in graph["model_configs.libraries"]  # TYPE_CHECKING
    lazy = import_graph(lazy=True)[REGISTRY]
    assert "model_configs.libraries.transformers.adapter" in lazy  # a registry's string
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def neuron_in_code(source: str) -> list[str]:
    """Where `source` names neuron in code: an import, an identifier (name, attribute,
    argument, keyword, definition), or a string that is a name rather than prose (no spaces:
    a device name such as "neuron:0", a module path, a package name)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(a.name for a in node.names)]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            names = [node.arg]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and not any(c.isspace() for c in node.value)
        ):
            names = [node.value]
        found += [f"line {node.lineno}: {n}" for n in names if _NEURON.search(n)]  # type: ignore[attr-defined]
    return found


def test_nothing_outside_the_device_package_names_neuron():
    """Issue 18: the device is one plug-in. Stages, the child process, the op sweep, the
    reports and the CLI ask the `Device` hooks (compile options, op classification, process
    env, what the compiler saw), never neuron by name."""
    wrong = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(DEVICE_PACKAGE) or rel in NAMES_NEURON:
                continue
            wrong += [f"{rel} {hit}" for hit in neuron_in_code(path.read_text(encoding="utf-8"))]
    assert wrong == [], "neuron named outside its package:\n" + "\n".join(wrong)


def test_the_neuron_reader_sees_code_not_prose():
    code = """
\"\"\"A docstring about neuron.\"\"\"
import runners.devices.neuron.compiler
from runners.devices import neuron
x = compile_backend == "neuron"
help_text = "cpu, cuda, neuron (default cpu)"
config = {"lin_neurons": 16}
def f(neuron_options): ...
"""
    hits = [h.split(": ", 1)[1] for h in neuron_in_code(code)]
    assert hits == ["runners.devices.neuron.compiler", "neuron", "neuron", "neuron_options"]


# ---- what only a device knows --------------------------------------------------------------
# Each device is one folder, runners/devices/<name>/, and declares what only it knows
# (`Device.knowledge`: its environment variables and error texts; its options' flags). No
# product file outside its folder (code, data, templates) may hold one of those strings; its
# name as a reader's example or default may stay (docs/architecture.md, "Devices").
DEVICES_DIR = "runners/devices/"


def device_homes() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Registered device -> (its folder, relative to the root; what only it knows). Imports the
    registry and the device classes (which import no torch), unlike the rules above."""
    import inspect

    from runners.devices import device_class, device_knowledge

    out = {}
    for name, strings in device_knowledge().items():
        home = Path(inspect.getfile(device_class(name))).resolve().parent
        out[name] = (
            home.relative_to(Path(__file__).resolve().parent.parent).as_posix() + "/",
            strings,
        )
    return out


def product_files(root: Path) -> list[Path]:
    """Every text file of the six folders (code, data, templates), caches left out."""
    return [
        p
        for folder in FOLDERS
        for p in sorted((root / folder).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".png"}
    ]


def knowledge_outside(root: Path, homes: Mapping[str, tuple[str, tuple[str, ...]]]) -> list[str]:
    """`file: device knows 'string'` for each product file outside a device's folder that
    holds what only that device knows."""
    wrong = []
    for path in product_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for name, (home, strings) in homes.items():
            if not rel.startswith(home):
                wrong += [f"{rel}: {name} knows {s!r}" for s in strings if s in text]
    return sorted(set(wrong))


def test_a_device_s_knowledge_stays_in_its_folder():
    """Issue 36: outside runners/devices/<name>/, no product file names a device's own
    environment variables, error texts or options: the core asks the device (its options, its
    next-step classes, its op declarations), and the device's data lives in its folder."""
    homes = device_homes()
    assert all(home.startswith(DEVICES_DIR) and home != DEVICES_DIR for home, _ in homes.values())
    assert homes["neuron"][1], "the neuron device declares what only it knows"
    wrong = knowledge_outside(ROOT, homes)
    assert wrong == [], "a device's knowledge outside its folder:\n" + "\n".join(wrong)


def test_the_knowledge_rule_sees_a_leak_in_code_and_data(tmp_path):
    homes = {"foo": ("runners/devices/foo/", ("FOO_SECRET_ENV", "--foo-mode"))}
    (tmp_path / "runners" / "devices" / "foo" / "data").mkdir(parents=True)
    (tmp_path / "ground" / "data").mkdir(parents=True)
    (tmp_path / "runners" / "devices" / "foo" / "data" / "x.json").write_text('"FOO_SECRET_ENV"')
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "x.py").write_text('HELP = "foo: the default (e.g. --device foo)"\n')
    assert knowledge_outside(tmp_path, homes) == []
    (tmp_path / "ground" / "data" / "steps.json").write_text('{"step": "set FOO_SECRET_ENV=1"}')
    (tmp_path / "sweep" / "x.py").write_text('p.add_argument("--foo-mode")\n')
    assert knowledge_outside(tmp_path, homes) == [
        "ground/data/steps.json: foo knows 'FOO_SECRET_ENV'",
        "sweep/x.py: foo knows '--foo-mode'",
    ]


def test_every_device_is_a_folder_of_its_own():
    """A registry entry names a package, runners.devices.<folder> (or a module inside it), and
    a folder under runners/devices/ is a registered device's or holds no device."""
    from runners.devices import DEVICES

    folders = {t.split(":")[0].split(".")[2] for t in DEVICES.values()}
    for target in DEVICES.values():
        module = target.split(":")[0]
        assert module.startswith("runners.devices.") and module.count(".") >= 2, target
        assert (ROOT / DEVICES_DIR / module.split(".")[2] / "__init__.py").is_file(), target
    packages = {p.parent.name for p in (ROOT / DEVICES_DIR).glob("*/__init__.py")}
    assert packages == folders


def library_of(module: str) -> str | None:
    """The library package a project module belongs to (`model_configs.libraries.timm.shrink`
    -> `timm`), or None (the registry, the interface, anything else)."""
    parts = module.split(".")
    if parts[:2] != ["model_configs", "libraries"] or len(parts) < 3:
        return None
    return parts[2] if (ROOT / LIBRARIES / parts[2]).is_dir() else None


def registry_entries(path: Path, name: str) -> dict[str, str]:
    """The literal dict `name` of the registry module `path`: key -> lazy target (with `ast`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == name for t in targets):
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    found[ast.literal_eval(key)] = ast.literal_eval(value)  # type: ignore[arg-type]
    return found


def registered_packages() -> dict[str, str]:
    """Library package -> the Hub library_name the registry gives it."""
    entries = registry_entries(ROOT / LIBRARIES / "__init__.py", "ADAPTERS")
    return {
        library_of(t.split(":")[0]) or t.split(":")[0]: library for library, t in entries.items()
    }


def test_every_library_is_one_registered_package():
    """Each registry entry is a package's `adapter` module, and each package is registered once."""
    packages = sorted(p.name for p in (ROOT / LIBRARIES).iterdir() if (p / "__init__.py").is_file())
    registered = registered_packages()
    assert sorted(registered) == packages, "a library package the registry does not name, or "
    "an entry outside model_configs/libraries/"
    for package in packages:
        assert (ROOT / LIBRARIES / package / "adapter.py").is_file(), package


def test_only_the_registry_names_a_library():
    """A library package is imported by itself, named by the registry (lazily), and imported by
    another library only where `LIBRARY_DEPENDENCIES` says why; never by the rest of the house."""
    wrong = []
    for module, targets in import_graph(lazy=True).items():
        if module == REGISTRY:
            continue
        here = library_of(module)
        for target in targets:
            there = library_of(target)
            if there is None or there == here or (here, there) in LIBRARY_DEPENDENCIES:
                continue
            wrong.append(f"{module} -> {target}")
    assert wrong == [], "library packages imported from outside:\n" + "\n".join(sorted(wrong))


def _library_imports() -> dict[str, str]:
    """Python package a library's adapter needs -> its package folder (from `package = ...`)."""
    found = {}
    for package in registered_packages():
        tree = ast.parse((ROOT / LIBRARIES / package / "adapter.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "package" for t in node.targets)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.setdefault(node.value.value, package)
    return found


def test_a_library_is_imported_only_inside_its_package():
    """`import timm` (and every other library's own package) happens in its package only, or
    in another library's that builds on it, or where `IMPORTS_LIBRARY` says why."""
    owners = _library_imports()
    assert {"transformers", "diffusers", "timm"} <= set(owners)  # the reader sees them
    wrong = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            here = rel.split("/")[2] if rel.startswith(LIBRARIES) else None
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[str]
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    owner = owners.get(top)
                    if owner is None or owner == here or (here, owner) in LIBRARY_DEPENDENCIES:
                        continue
                    if not {(rel, top), (here, top)} & set(IMPORTS_LIBRARY):
                        wrong.append(f"{rel}:{node.lineno} imports {name}")
    assert wrong == [], "a library's package imported outside it:\n" + "\n".join(wrong)


# The stage registry: one package per stage group under STAGES, named by one entry of `GROUPS`.
STAGES = "runners/stages/"
STAGE_REGISTRY = "runners.stages"
# Module-level names that would declare stages outside their folders (a group's members, the
# needs, the CLI's groups or help) when their value is written by hand (names stages, or text).
_STAGE_TABLE = re.compile(r"[A-Z_]*_STAGES|STAGE_NEEDS|STAGE_GROUPS|STAGES_HELP")


def stage_declarations() -> set[str]:
    """The modules that declare stages and that the reading side may import: the registry,
    `declare`, and each group package's `__init__` (its declaration)."""
    groups = (p.name for p in (ROOT / STAGES).iterdir() if (p / "__init__.py").is_file())
    return {STAGE_REGISTRY, f"{STAGE_REGISTRY}.declare", *(f"{STAGE_REGISTRY}.{g}" for g in groups)}


def registered_groups() -> dict[str, str]:
    """Stage group package -> the group name `GROUPS` gives it."""
    found = {}
    for group, target in registry_entries(ROOT / STAGES / "__init__.py", "GROUPS").items():
        module, _, attr = target.partition(":")
        assert attr == "GROUP", f"{module}: a group's declaration is its GROUP"
        found[module.removeprefix(f"{STAGE_REGISTRY}.")] = group
    return found


def test_every_stage_group_is_one_registered_folder():
    """Each `GROUPS` entry is a group package's declaration, each package is registered once,
    and every runner a group declares lives in its own folder."""
    from runners import stages as registry

    packages = sorted(p.name for p in (ROOT / STAGES).iterdir() if (p / "__init__.py").is_file())
    assert sorted(registered_groups()) == packages
    for group in registry.stage_groups():
        package = registry.GROUPS[group.name].split(":")[0]
        for decl in group.stages:
            assert decl.runner.startswith(f"{package}."), (decl.name, decl.runner)


def test_the_registry_declares_every_stage_once_in_order():
    """The `Stage` vocabulary (the `stage` column's) and the registry agree: every stage is
    declared by exactly one group, in the vocabulary's order (the order a run does them), and
    what a stage builds on comes before it."""
    from ground.schema import STAGE_ORDER
    from runners import stages as registry

    assert registry.stage_order() == STAGE_ORDER
    for stage, needs in registry.stage_needs().items():
        assert all(STAGE_ORDER.index(n) < STAGE_ORDER.index(stage) for n in needs), stage


def test_stage_declarations_import_only_ground():
    """The reading side and the CLI read the declarations: they import `ground` and each other
    only (no torch, no runner, no model library), so reading them costs no heavy import."""
    declared = stage_declarations()
    graph = import_graph()
    wrong = sorted(
        f"{m} -> {t}"
        for m in declared
        for t in graph[m]
        if t not in declared and not t.startswith("ground")
    )
    assert wrong == [], "a stage declaration imports more than ground:\n" + "\n".join(wrong)
    assert graph["runners"] == frozenset()  # importing `runners.stages` runs it first
    for module in declared:
        path = ROOT / (
            module.replace(".", "/")
            + ("/__init__.py" if module != "runners.stages.declare" else ".py")
        )
        tree = ast.parse(path.read_text(encoding="utf-8"))
        third = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        } | {
            (n.module or "").split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and not n.level
        }
        assert not third & {"torch", "transformers", "peft", "trl", "accelerate"}, module


def _declares_stages(source: str) -> list[str]:
    """Where `source` declares stages: a `StageDecl` / `StageGroup`, a module-level table named
    like one (`*_STAGES`, `STAGE_NEEDS`, `STAGE_GROUPS`, `STAGES_HELP`), or a literal that lists
    two stages or more by hand (`(Stage.DDP, Stage.FSDP)`)."""
    found = []
    tree = ast.parse(source)
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        value = getattr(node, "value", None)
        by_hand = value is not None and (
            any(_names_a_stage(n) for n in ast.walk(value))
            or (isinstance(value, ast.Constant) and isinstance(value.value, str))
        )
        found += [
            f"line {node.lineno}: {t.id}"
            for t in targets
            if isinstance(t, ast.Name) and _STAGE_TABLE.fullmatch(t.id) and by_hand
        ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in {
            "StageDecl",
            "StageGroup",
        }:
            found.append(f"line {node.lineno}: {node.func.id}")  # type: ignore[attr-defined]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            named = [i for i in items if i is not None and _names_a_stage(i)]
            if len(named) >= 2:
                found.append(f"line {node.lineno}: {len(named)} stages listed")
    return found


def _names_a_stage(node: ast.AST) -> bool:
    """`Stage.X` or `Stage.X.value`."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Stage"
    )


def test_only_the_stage_folders_declare_stages():
    """A stage's group, needs and help are declared in its folder (`runners/stages/<group>/`)
    and read from the registry everywhere else: the CLI, the run settings, the engine, the
    reports. The `Stage` enum (`ground/schema.py`) is the row contract's vocabulary only."""
    wrong = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(STAGES):
                continue
            wrong += [f"{rel} {hit}" for hit in _declares_stages(path.read_text(encoding="utf-8"))]
    assert wrong == [], "stages declared outside runners/stages/:\n" + "\n".join(wrong)


def test_the_stage_declaration_reader_sees_declarations():
    code = """
TRAINING_STAGES = (Stage.OPTIMIZER, Stage.AMP)
STAGE_NEEDS: dict = {Stage.FORWARD: (Stage.LOAD,)}
STAGES_HELP = "load,forward"
HF_STAGES = tuple(s.value for s in registry.group_stages("hf_training"))
decl = StageDecl(Stage.LOAD, "m:C")
def f():
    return stages[Stage.OPTIMIZER.value], {Stage.DDP.value: 1, Stage.TP.value: 2}
"""
    hits = [h.split(": ", 1)[1] for h in _declares_stages(code)]
    assert sorted(hits) == sorted(
        [
            "TRAINING_STAGES",
            "2 stages listed",
            "STAGE_NEEDS",
            "STAGES_HELP",
            "StageDecl",
            "2 stages listed",
        ]
    )


TRIVIAL_DECLARATION = '''"""A stage that only waits: the walk-through of docs/architecture.md, built in a test."""

from ground.schema import Stage
from runners.stages.declare import StageDecl, StageGroup

GROUP = StageGroup(
    name="idle",
    help="idle: brings load",
    stages=(
        StageDecl(
            Stage("idle"),
            "idle_stages.wait:IdleStage",
            needs=(Stage.LOAD,),
            columns=("idle_s",),
            help="one call that does nothing",
        ),
    ),
    section="idle",
    section_title="Idle: does nothing run?",
)
'''
TRIVIAL_RUNNER = """from runners.stages.engine import StageRunner


class IdleStage(StageRunner):
    def run(self, ctx):
        ctx.extra["idle_s"] = 0.0
"""


def test_a_new_stage_is_one_folder_and_one_registry_line(tmp_path, monkeypatch):
    """Adding a stage as docs/architecture.md says: its folder (a declaration and a runner),
    its `GROUPS` line, and its name in the `Stage` vocabulary (monkeypatched here, as an enum
    member cannot be added otherwise); then the CLI's `--stages` (its help, the group name,
    the needs it brings), the engine's columns and runner, and the report's sections have it,
    with no other file changed."""
    import argparse

    from ground.schema import Stage
    from reports import summary
    from reports.render import sections
    from runners import stages as registry
    from sweep.commands import options

    folder = tmp_path / "idle_stages"
    folder.mkdir()
    (folder / "__init__.py").write_text(TRIVIAL_DECLARATION)
    (folder / "wait.py").write_text(TRIVIAL_RUNNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    idle = str.__new__(Stage, "idle")
    idle._name_, idle._value_ = "IDLE", "idle"
    monkeypatch.setitem(Stage._member_map_, "IDLE", idle)
    monkeypatch.setitem(Stage._value2member_map_, "idle", idle)
    monkeypatch.setattr(Stage, "_member_names_", [*Stage._member_names_, "IDLE"])
    monkeypatch.setitem(registry.GROUPS, "idle", "idle_stages:GROUP")  # the registry line
    registry.forget()
    try:
        parser = argparse.ArgumentParser()
        options.add_model_arguments(parser)
        assert "idle (idle: brings load)" in " ".join(parser.format_help().split())
        assert options.stage_list("idle") == [Stage.LOAD, idle]
        assert options.stage_list("all")[-1] == idle
        assert registry.stage_needs()[idle] == (Stage.LOAD,)
        assert "idle_s" in registry.extra_columns()
        runner = registry.load_target(registry.declarations()[idle].runner)
        assert runner.__name__ == "IdleStage"

        def counts(q, run_id, stages, labels, dtype=None):  # what the store would count
            line = {"label": labels["idle"], "rows": 3, "passed": 2, "failed": 1, "not_run": 0}
            line |= {"skipped": 0, "no_fallback": 2, "passed_share": 2 / 3}
            line |= {"passed_downloads_share": 0.5, "no_fallback_downloads_share": 0.5}
            return {"ran": True, "models": 3, "downloads": 40, "stages": [line]}

        monkeypatch.setattr(summary.coverage, "stage_group", counts)
        report = {"stage_groups": summary.other_groups(None, "run", None)}
        built = [b(report) for b in sections._group_sections(report)]
        assert [(s.key, s.title) for s in built] == [("idle", "Idle: does nothing run?")]
        assert built[0].rows[0][:3] == ["idle: one call that does nothing", "2", "66.7%"]
    finally:
        monkeypatch.undo()
        registry.forget()
    assert "idle" not in registry.stages_help()


def _names_in_code(source: str) -> set[str]:
    """Identifiers, attributes, imported modules and name-like strings of `source`."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update([node.module or "", *(a.name for a in node.names)])
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and not any(c.isspace() for c in node.value)
        ):
            found.add(node.value)
    return found


def test_sizing_asks_the_adapter_what_only_the_library_knows():
    """Issue 36: the sizing package reads no library's config fields and imports no library
    (nor peft): the adapter's `attention_layout` and `lora_targets` say them."""
    libraries = set(_library_imports()) | {"peft"}
    wrong = []
    for path in sorted((ROOT / SIZING).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        names = _names_in_code(path.read_text(encoding="utf-8"))
        wrong += [f"{rel}: {n}" for n in sorted(names & LIBRARY_FIELDS)]
        wrong += [f"{rel}: imports {n}" for n in sorted(names) if n.split(".")[0] in libraries]
    assert wrong == [], "library knowledge in the sizing package:\n" + "\n".join(wrong)
    graph = import_graph()
    assert "model_configs.libraries" in graph["sizing.measure"]  # the reader sees the ask


def test_sizing_is_one_package_and_the_hardware_figures_live_with_their_device():
    """Sizing's modules are in `sizing/` only, and each device's hardware figures are one file
    in its own folder (`runners/devices/<name>/data/hardware.json`), the files the loader reads."""
    from sizing.hardware import DEVICES_DIR, hardware_files

    elsewhere = sorted(
        p.relative_to(ROOT).as_posix()
        for folder in FOLDERS
        if folder + "/" != SIZING
        for p in (ROOT / folder).rglob("*.py")
        if "sizing" in p.stem or "hardware" in p.stem
    )
    assert elsewhere == sorted(SIZING_ELSEWHERE), "sizing outside its package"
    found = sorted(
        p.relative_to(ROOT).as_posix()
        for folder in FOLDERS
        for p in (ROOT / folder).rglob(HARDWARE_FILE)
    )
    assert found == sorted(p.relative_to(ROOT).as_posix() for p in hardware_files().values())
    assert DEVICES_DIR == ROOT / "runners" / "devices"
    assert {"neuron", "cuda"} <= set(hardware_files())
