"""What a service loads at rest: the MCP library, httpx (HTTP tools) and the openai SDK (AutoGen's
stock client) only when a pipeline uses them, PyYAML only with a configuration file, and never ``requests``
(which jsonref, under autogen-core, would import for remote ``$ref``s no AutoGen schema has). Each check runs in a fresh interpreter, since this
test process has imported everything already. MCP, HTTP-tool and stock-client pipelines working is
tested over HTTP elsewhere (test_service_tools.py, test_errors.py)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from duet.agents.pipeline._legacy_providers import NAMED_COMPONENTS
from tests.conftest import ROOT

OPTIONAL_LIBRARIES = ("mcp", "httpx", "openai", "autogen_ext.tools.mcp", "autogen_ext.tools.http", "autogen_ext.models.openai",
                      "requests", "yaml")


STEPS = {  # each step's code, run one after the other in one interpreter
    "the default app": "from duet.api._app import create_app\napp = create_app()",
    "MCP tool": "from duet.workbenches import McpServerTool",
    "HTTP tool": "from duet.workbenches import HttpServiceTool",
    "requests imported by the caller": "import requests",
}


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """The optional libraries in ``sys.modules`` after each step, in a fresh interpreter whose default
    app has two stages on Duet's own client and no service tools."""
    script = "import sys, json\nloaded = {}\n" + "".join(
        f"{code}\nloaded[{step!r}] = [name for name in {OPTIONAL_LIBRARIES!r} if name in sys.modules]\n"
        for step, code in STEPS.items()
    ) + "print(json.dumps(loaded))\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    env.update({"DUET_ANSWER_BASE_URL": "http://127.0.0.1:9/v1", "DUET_ANSWER_MODEL": "answer",
                "DUET_REASONER_BASE_URL": "http://127.0.0.1:9/v1", "DUET_REASONER_MODEL": "reasoner", "DUET_API_KEYS": ""})
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_default_app_loads_no_optional_library(loaded: dict[str, list[str]]) -> None:
    assert loaded["the default app"] == []


def test_the_public_names_load_their_library_on_first_use(loaded: dict[str, list[str]]) -> None:
    assert {"mcp", "autogen_ext.tools.mcp"} <= set(loaded["MCP tool"])
    assert {"httpx", "autogen_ext.tools.http"} <= set(loaded["HTTP tool"])


def test_requests_still_imports_for_the_callers_code(loaded: dict[str, list[str]]) -> None:
    assert "requests" in loaded["requests imported by the caller"]


def test_unknown_names_are_still_attribute_errors() -> None:
    import duet.workbenches

    with pytest.raises(AttributeError, match="NoSuchTool"):
        duet.workbenches.NoSuchTool  # noqa: B018


@pytest.mark.parametrize(("provider", "path"), NAMED_COMPONENTS)
def test_named_components_match_their_classes(provider: str, path: str) -> None:
    """The legacy provider table names these components instead of importing them: the names must be theirs."""
    module, _, name = path.rpartition(".")
    component = getattr(importlib.import_module(module), name)
    assert component.component_provider_override == provider
    assert f"{component.__module__}.{component.__qualname__}" == path
    assert getattr(importlib.import_module("duet.workbenches"), provider.rpartition(".")[2]) is component
