"""``duet`` from another checkout, on this environment's dependencies: the "before" of a same-run A/B.

``python bench/checkout_duet.py CHECKOUT serve`` runs ``duet serve`` with the packages ``duet``,
``duet.agents``, ``duet.api`` and ``duet.workbenches`` taken from the folders of ``CHECKOUT`` (say, a
``git archive`` of the commit before a change) instead of the installed ones. The harness starts
Duet this way when ``DUET_BENCH_CHECKOUT`` names a checkout (``harness.start_duet``).
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Sequence

FOLDERS = {"duet": "duet", "duet.agents": "agents", "duet.api": "api", "duet.workbenches": "workbenches"}


class CheckoutFinder:
    """Finds the four top packages in the checkout (their sub-modules follow their ``__path__``)."""

    def __init__(self, checkout: Path) -> None:
        self.folders = {name: checkout / folder for name, folder in FOLDERS.items()}

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


def main() -> None:
    checkout = Path(sys.argv[1]).resolve()
    if not (checkout / "agents" / "__init__.py").is_file():
        raise SystemExit(f"{checkout}: not a Duet checkout")
    sys.meta_path.insert(0, CheckoutFinder(checkout))
    sys.argv = ["duet", *sys.argv[2:]]
    from duet.api import main as duet_main

    duet_main()


if __name__ == "__main__":
    main()
