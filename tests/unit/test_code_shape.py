"""The package's functions stay small: none over 60 lines (issue 24's bound).

Complexity (cyclomatic ≤ 20) is held by ruff's C901 in ``make test``; the length has no ruff rule, so
this test walks the source of every package pyproject.toml installs and names each function too long.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 60


def package_folders() -> list[Path]:
    """The folder of every package in pyproject.toml's list (``duet.agents`` lives in ``agents/``)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots: dict[str, str] = setuptools["package-dir"]
    folders = []
    for package in setuptools["packages"]:
        parent = max((name for name in roots if package == name or package.startswith(name + ".")), key=len, default=None)
        relative = package.replace(".", "/") if parent is None else roots[parent] + package[len(parent):].replace(".", "/")
        folders.append(ROOT / relative)
    return folders


def function_lengths(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """``(where, lines)`` of every function and method in ``path``, from its ``def`` to its last line
    (decorators left out, docstring counted), nested ones on their own as well as in their parent."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
            found.append((where, node.end_lineno - node.lineno + 1))
    return found


def test_the_package_folders_are_found() -> None:
    folders = package_folders()
    assert {folder.relative_to(ROOT).as_posix() for folder in folders} >= {"duet", "agents", "api", "workbenches"}
    assert all((folder / "__init__.py").is_file() for folder in folders), folders


def test_no_function_in_the_package_is_over_60_lines() -> None:
    modules = [path for folder in package_folders() for path in sorted(folder.glob("*.py"))]
    assert len(modules) > 50  # the walk did find the package
    too_long = [f"{where}: {lines} lines" for path in modules for where, lines in function_lengths(path) if lines > MAX_FUNCTION_LINES]
    assert not too_long, "functions over 60 lines (split them):\n" + "\n".join(too_long)


def test_a_long_function_is_named(tmp_path: Path) -> None:
    """The measure itself: a 61-line function is caught, a 60-line one is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    source = tmp_path / "sample.py"
    source.write_text(f"def fits():\n{body}\n\n\nasync def too_long():\n{body}\n    x = 0\n")
    lengths = {where.rsplit(" ", 1)[1]: lines for where, lines in function_lengths(source, tmp_path)}
    assert lengths == {"fits": 60, "too_long": 61}
