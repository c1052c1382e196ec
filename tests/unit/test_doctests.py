"""The examples in the docstrings of the installed packages run, and show what they say.

The modules are imported by their installed names (``duet.agents._thinking``, ...), as every test
imports them: pytest's ``--doctest-modules`` on the repository's folders would import a second
copy of each module under its folder's name.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

PACKAGES = ("duet.agents", "duet.workbenches", "duet.api")
FEWEST_EXAMPLES = 20
"""The examples there are today: fewer means some stopped being found (or were deleted)."""


def modules() -> list[str]:
    names: list[str] = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        names.extend(module.name for module in pkgutil.walk_packages(package.__path__, package_name + "."))
    return names


def examples_in(module: ModuleType) -> list[doctest.DocTest]:
    """The module's own docstring examples (not those of names it imports)."""
    return [test for test in doctest.DocTestFinder().find(module) if test.examples]


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in examples_in(module):
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(report)


def test_examples_are_found() -> None:
    found = sum(len(test.examples) for name in modules() for test in examples_in(importlib.import_module(name)))
    print(f"{found} docstring examples in {', '.join(PACKAGES)}")
    assert found >= FEWEST_EXAMPLES
