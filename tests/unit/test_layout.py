"""The house's rules, held against the code: api/ reaches agents/ and workbenches/ only through their
faces (their ``__init__``s and sub-package ``__init__``s), and no module of one room imports a
private module of another (the root package's few shared helpers, ``duet._wire_json`` and
``duet._small_deque``, serve every room). The suite mirrors the package: no test module loose in
tests/, every folder of tests a package, each unit test file named after the module it tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = {"agents": "duet.agents", "api": "duet.api", "workbenches": "duet.workbenches"}


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def private_part(module: str) -> str | None:
    """The first ``_``-prefixed part of a ``duet.`` module path (``duet.agents._run`` → ``_run``), or None."""
    parts = module.split(".")
    return next((part for part in parts[1:] if part.startswith("_") and not part.startswith("__")), None)


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_room_reaches_into_another_rooms_private_modules(folder: str) -> None:
    offending = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in imports_of(path):
            if not module.startswith("duet.") or private_part(module) is None:
                continue
            owner = module.split(".")[1]
            if owner.startswith("_"):  # the root package's own helpers (duet._wire_json): shared by every room
                continue
            if owner != PACKAGES[folder].split(".")[1]:  # another room's private module
                offending.append(f"{path.relative_to(ROOT)}: {module}")
    assert not offending, "imports of another package's private modules:\n" + "\n".join(offending)


def test_the_edge_uses_the_faces_of_the_agents_and_the_workbenches() -> None:
    offending = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        for module in imports_of(path):
            if module.startswith(("duet.agents", "duet.workbenches")) and private_part(module) is not None:
                offending.append(f"{path.relative_to(ROOT)}: {module}")
    assert not offending, "\n".join(offending)


# -- the suite's own layout: it mirrors the package ------------------------------------------------

TESTS = ROOT / "tests"
UNIT = TESTS / "unit"


def test_no_test_module_lies_loose_in_tests() -> None:
    """tests/ itself holds the shared helpers only; each test lives in the folder of its kind
    (unit/<room>/, http/, clients/, ...)."""
    loose = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert not loose, f"test modules directly in tests/ (move them to unit/<room>/, http/ or clients/): {loose}"


def test_every_folder_of_tests_is_a_package() -> None:
    """Test modules are imported by their dotted path (tests.http.test_errors): two files of one name
    in two folders never clash."""
    folders = {path.parent for path in TESTS.rglob("*.py") if "node_modules" not in path.parts}
    missing = sorted(str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").exists())
    assert not missing, f"folders without __init__.py: {missing}"


def module_under_test(test_file: Path) -> list[Path]:
    """Where the module a unit test file names may be: tests/unit/agents/upstream/test_sse.py names
    agents/upstream/_sse.py (or sse.py, or a package of that name)."""
    room = ROOT / test_file.parent.relative_to(UNIT)
    name = test_file.stem.removeprefix("test_")
    return [room / f"_{name}.py", room / f"{name}.py", room / f"_{name}" / "__init__.py", room / name / "__init__.py"]


def test_each_unit_test_file_is_named_after_a_module_that_exists() -> None:
    """tests/unit/<room>/test_<module>.py mirrors <room>/_<module>.py; files directly in tests/unit/
    hold the rules of the whole package (layout, faces, ...)."""
    orphans = sorted(str(path.relative_to(ROOT)) for path in UNIT.rglob("test_*.py")
                     if path.parent != UNIT and not any(place.exists() for place in module_under_test(path)))
    assert not orphans, f"unit test files naming no module: {orphans}"
