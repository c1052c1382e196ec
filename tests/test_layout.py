"""The house's rules, held against the code: api/ reaches agents/ and workbenches/ only through their
faces (their ``__init__``s and sub-package ``__init__``s), and no module of one room imports a
private module of another (the root package's few shared helpers, ``duet._wire_json`` and
``duet._small_deque``, serve every room)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
