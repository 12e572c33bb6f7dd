"""The package's shape: imports run one way, modules stay small, independent fits overlap."""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import perspective_app
import pkps_core
from pkps_core.space import PerspectiveSpace, runtime
from pkps_core.space.sums import FactorizedSums
from pkps_core.synthetic import make_synthetic

PACKAGE_DIR = Path(pkps_core.__file__).resolve().parent
APP_DIR = Path(perspective_app.__file__).resolve().parent
MAX_LINES = 500
# Lower layers never import higher ones (docs/reference/layout.md, "Layers", says the same:
# keep the two in step). Same-layer imports are allowed.
LAYERS = [
    {"records", "text", "outputs", "reading", "lazy"},
    {"embed", "synthetic", "itemsim"},
    {"store", "importers"},
    {"space"},
    {"methods"},
    {"trust"},
    {"predict", "predictor"},
    {"protocols"},
    {"views", "uploads", "demo", "leaderboard", "leaderboard_html", "leaderboard_logit"},
    {"report"},  # a view's content as figures, HTML and text, for the page and the CLI
    {
        "cli",
        "cli_args",
        "cli_common",
        "cli_fit",
        "cli_leaderboard",
        "cli_predict",
        "cli_report",
        "cli_scale",
        "__main__",
        "__init__",
    },
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """pkps_core modules imported anywhere in ``path`` (module level or inside functions);
    ``from package import submodule`` counts as importing the submodule."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in modules else base)
    return {name for name in found if name in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_between_modules():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise AssertionError(f"{module} belongs to no layer of LAYERS; add it where it sits")


def test_imports_run_one_way_along_the_layers():
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert not upward, upward


def test_methods_never_import_predict_or_trust():
    graph = _graph()
    for module, targets in graph.items():
        if module.startswith("pkps_core.methods"):
            bad = {t for t in targets if t.split(".")[1] in ("predict", "trust")}
            assert not bad, f"{module} imports {bad}"


def test_views_shape_what_predict_returns_and_never_call_methods():
    """A view lays out what :mod:`pkps_core.predict` and the predictor return (the New
    model report takes a ``TargetRun``); the methods are the library's."""
    for module, targets in _graph().items():
        if module.split(".")[1:2] in (["views"], ["report"]):
            bad = {t for t in targets if t.startswith("pkps_core.methods")}
            assert not bad, f"{module} imports {bad}"


def _imported_tops(path: Path) -> set[str]:
    """The top-level packages ``path`` imports anywhere (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
    return found


def test_import_finder_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\ndef f():\n    from streamlit.x import y\n", encoding="utf-8")
    assert _imported_tops(module) == {"os", "streamlit"}


def test_library_never_imports_streamlit_nor_the_app():
    """pkps_core is the library: the app (perspective_app) and Streamlit sit above it."""
    for path in PACKAGE_DIR.rglob("*.py"):
        assert not _imported_tops(path) & {"streamlit", "perspective_app"}, path


def test_no_module_imports_a_page_script():
    """The page scripts (perspective_app/app_pages/) are run by Streamlit, one per page:
    what two pages need is in perspective_app.shared, never imported from a page."""
    importers = [
        path
        for path in [*APP_DIR.rglob("*.py"), *(PACKAGE_DIR.parent / "tests").rglob("*.py")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom | ast.Import)
        and any(
            "app_pages" in name
            for name in (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
            )
        )
    ]
    assert importers == []


def test_every_download_button_goes_through_the_shared_helper():
    """A download that reruns the page re-registers its file while the browser fetches it
    (a cancelled download in CI): every page's button is ``shared.download_button``, which
    sets ``on_click="ignore"``; only that helper calls Streamlit's."""
    callers = sorted(
        f"{path.relative_to(APP_DIR)}:{node.lineno}"
        for path in APP_DIR.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "download_button"
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "shared")
    )
    assert callers == ["shared/widgets.py:" + str(_helper_call_line())], callers


def _helper_call_line() -> int:
    """The line of Streamlit's ``download_button`` call inside the shared helper."""
    source = (APP_DIR / "shared/widgets.py").read_text(encoding="utf-8")
    helper = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "download_button"
    )
    calls = [
        node.lineno
        for node in ast.walk(helper)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "download_button"
    ]
    assert len(calls) == 1, calls
    return calls[0]


def test_streamlit_main_script_has_no_pages_folder_beside_it():
    """Streamlit takes a ``pages/`` folder beside the main script for its older multipage
    mode, and a server's first run then shows the page alone, without the navigation and
    sidebar of ``main.py`` (seen with ``pkps app``): the page scripts are in ``app_pages/``."""
    assert (APP_DIR / "main.py").is_file()
    assert not (APP_DIR / "pages").exists()
    assert not (PACKAGE_DIR.parent / "pages").exists()  # beside the checkout's app.py
    assert sorted(p.name for p in (APP_DIR / "app_pages").glob("*.py")) != []


def test_modules_are_short_or_say_why():
    long = []
    app_modules = {str(p.relative_to(APP_DIR.parent)): p for p in sorted(APP_DIR.rglob("*.py"))}
    for name, path in (_modules() | app_modules).items():
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if len(text.splitlines()) > MAX_LINES and f"over {MAX_LINES} lines" not in docstring:
            long.append(f"{name} ({len(text.splitlines())} lines)")
    assert not long, long


def _cache(seed: int):
    return make_synthetic(n_models=14, n_tasks=4, budget=6, rho=0.0, random_state=seed).records


def test_two_fits_in_threads_overlap_and_match_solo_fits(monkeypatch):
    """Each fit's kernel sums wait, inside the sums, until the other fit is inside its own:
    a lock held across the sums (as one process-wide lock used to be) would make the first
    wait in vain and the test fail, not hang."""
    caches = {"a": _cache(1), "b": _cache(2)}
    solo = {
        name: PerspectiveSpace(query_bandwidth="median").fit(records).distance_matrix_
        for name, records in caches.items()
    }
    blas_before = runtime._current_blas_threads()
    inside = {name: threading.Event() for name in caches}
    met: dict[str, bool] = {}
    original = FactorizedSums.__call__

    def meeting(self, query_kernel):
        me = threading.current_thread().name
        other = "b" if me == "a" else "a"
        inside[me].set()
        met.setdefault(me, inside[other].wait(timeout=30))
        return original(self, query_kernel)

    monkeypatch.setattr(FactorizedSums, "__call__", meeting)
    fitted: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def fit(name: str) -> None:
        try:
            space = PerspectiveSpace(query_bandwidth="median").fit(caches[name])
            fitted[name] = space.distance_matrix_
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=fit, args=(name,), name=name) for name in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert met == {"a": True, "b": True}, "one fit waited for the other to finish"
    for name in caches:
        np.testing.assert_allclose(fitted[name], solo[name], rtol=1e-12, atol=1e-12)
    assert runtime._current_blas_threads() == blas_before


@pytest.mark.parametrize("size", [10, 1000])
def test_borrowed_buffers_are_never_shared(size):
    with runtime.borrow_buffer(size) as first, runtime.borrow_buffer(size) as second:
        assert not np.shares_memory(first, second)
        assert first.size == second.size == size


def test_test_modules_have_unique_names():
    """pytest imports test modules by basename (no packages under tests/): two files named
    alike abort collection in a clean checkout."""
    tests = Path(__file__).resolve().parent
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _layout_block() -> list[str]:
    page = (PACKAGE_DIR.parent / "docs" / "reference" / "layout.md").read_text(encoding="utf-8")
    section = page.split("## Layout", 1)[1]
    return section.split("```", 2)[1].splitlines()


def test_layout_page_lists_every_module_once():
    """docs/reference/layout.md's tree has one line per module of the library, the app and
    the benchmarks, under its folder: a module added or moved without it fails here."""
    root = PACKAGE_DIR.parent
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder) of the enclosing folder lines
    for line in _layout_block():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        folders = [(i, f) for i, f in folders if i < indent]
        path = "".join(f for _, f in folders) + name
        if name.endswith("/"):
            folders.append((indent, name))
        elif name.endswith(".py"):
            assert path not in listed, f"{path} is listed twice"
            listed.add(path)
    expected = {
        str(p.relative_to(root))
        for folder in ("pkps_core", "perspective_app", "bench")
        for p in (root / folder).rglob("*.py")
        if p.name != "__init__.py"
    }
    assert sorted(expected - listed) == []  # modules the Layout does not show
    others = {
        "app.py",
        "conftest.py",
        "tests/conftest.py",
        "pkps_core/__init__.py",
        "perspective_app/__init__.py",
    }
    assert sorted(listed - expected - others) == []  # lines naming no module


def test_layers_page_lists_the_layers_the_imports_are_checked_against():
    """docs/reference/layout.md's "Layers" is LAYERS, layer for layer (a name ending in
    ``*`` stands for every module of the layer starting so)."""
    page = (PACKAGE_DIR.parent / "docs" / "reference" / "layout.md").read_text(encoding="utf-8")
    section = page.split("## Layers", 1)[1]
    items = [line for line in section.splitlines() if re.match(r"\d+\. ", line)]
    written = [re.findall(r"`([\w*]+)`", line.split(" — ")[0]) for line in items]
    assert len(written) == len(LAYERS)
    for names, layer in zip(written, LAYERS, strict=True):
        stars = [n[:-1] for n in names if n.endswith("*")]
        covered = {n for n in layer if any(n.startswith(s) for s in stars)}
        assert {n for n in names if not n.endswith("*")} | covered == layer, (names, layer)


def test_the_cli_starts_without_the_numerics():
    # `pkps --help` and every input error answer before a fit is needed: the parser's
    # modules do not load scikit-learn (1.1 s -> 0.4 s per command here)
    import subprocess
    import sys

    heavy = ("sklearn", "pkps_core.space.estimator", "pkps_core.predictor.core")
    code = f"import sys, pkps_core.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
