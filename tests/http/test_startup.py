"""What an operator meets before the first request, over the real ``duet`` command (a subprocess):
one-line configuration errors with their exit codes, ``--version``, ``serve --help``, ``duet check``
(with and without ``--probe``) and the startup summary."""

from __future__ import annotations

import os
import subprocess
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from duet.api import EnvSettings
from tests.conftest import ANSWER, DUET, REASONER, ROOT, DuetServer, free_port
from tests.scripted_upstream import Reply, ScriptedUpstream

BAD_YAML = "pipelines:\n  - name: x\n   answer: {model: m}\n"  # the third line is indented one space short
# (name, argv, extra environment, exit code, the one line on stderr); {tmp} is the test's directory.
REFUSALS = [
    ("port", ["serve"], {"DUET_PORT": "abc"}, 2,
     "duet: cannot start: DUET_PORT=abc: Input should be a valid integer, unable to parse string as an integer"),
    ("port-range", ["serve"], {"DUET_PORT": "70000"}, 2,
     "duet: cannot start: DUET_PORT=70000: Input should be less than or equal to 65535"),
    ("log-level", ["serve"], {"DUET_LOG_LEVEL": "verbose"}, 2,
     "duet: cannot start: DUET_LOG_LEVEL=verbose: Input should be 'critical', 'error', 'warning', 'info' or 'debug'"),
    ("ping", ["serve"], {"DUET_PING_INTERVAL": "0"}, 2,
     "duet: cannot start: DUET_PING_INTERVAL=0: Input should be greater than 0"),
    ("reasoning-output", ["serve"], {"DUET_REASONING_OUTPUT": "bogus"}, 2,
     "duet: cannot start: DUET_REASONING_OUTPUT=bogus: Input should be 'reasoning_content', 'think' or 'hidden'"),
    ("workers-flag", ["serve", "--workers", "many"], {}, 2,
     "duet: cannot start: --workers many: expected a whole number of processes (at least 1) or 'auto', got 'many'"),
    ("yaml-syntax", ["serve", "--config", "{tmp}/bad.yaml"], {}, 2,
     "duet: cannot start: {tmp}/bad.yaml: line 3, column 4: expected <block end>, but found '<block mapping start>'"),
    ("yaml-value", ["serve"], {"DUET_CONFIG": "{tmp}/zero-ping.yaml"}, 2,
     "duet: cannot start: {tmp}/zero-ping.yaml: ping_interval: Input should be greater than 0"),
    ("missing-config", ["serve", "--config", "nope.yaml"], {}, 2,
     "duet: cannot start: nope.yaml: cannot read the configuration file: No such file or directory"),
    ("function-import", ["serve"], {"DUET_FUNCTION_TOOLS": "no_such_module:lookup"}, 2,
     "duet: cannot start: DUET_FUNCTION_TOOLS=no_such_module:lookup: No module named 'no_such_module'"),
    ("function-name", ["serve"], {"DUET_FUNCTION_TOOLS": "json:no_such_function"}, 2,
     "duet: cannot start: DUET_FUNCTION_TOOLS=json:no_such_function: module 'json' has no attribute 'no_such_function'"),
    ("export-config", ["export-team", "--config", "nope.yaml"], {}, 2,
     "duet: export-team: nope.yaml: cannot read the configuration file: No such file or directory"),
    ("export-tools", ["export-team", "--tools", "nope.json"], {}, 2,
     "duet: export-team: nope.json: cannot read the tools file: No such file or directory"),
    ("export-tools-json", ["export-team", "--tools", "{tmp}/bad.yaml"], {}, 2,
     "duet: export-team: {tmp}/bad.yaml: expected JSON with an OpenAI 'tools' list: Expecting value: line 1 column 1 (char 0)"),
    ("export-function", ["export-team"], {"DUET_FUNCTION_TOOLS": "no_such_module:lookup"}, 2,
     "duet: export-team: DUET_FUNCTION_TOOLS=no_such_module:lookup: No module named 'no_such_module'"),
    ("check", ["check"], {"DUET_LOG_LEVEL": "loud"}, 1,
     "duet: check: DUET_LOG_LEVEL=loud: Input should be 'critical', 'error', 'warning', 'info' or 'debug'"),
    ("check-yaml", ["check", "--config", "{tmp}/bad.yaml"], {}, 1,
     "duet: check: {tmp}/bad.yaml: line 3, column 4: expected <block end>, but found '<block mapping start>'"),
    ("check-function", ["check"], {"DUET_FUNCTION_TOOLS": "no_such_module:lookup"}, 1,
     "duet: check: DUET_FUNCTION_TOOLS=no_such_module:lookup: No module named 'no_such_module'"),
]


def run_duet(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``duet ARGV`` with no inherited ``DUET_*`` and a state store of its own, in ``cwd``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    full_env.update({"DUET_STATE_URL": "memory://", "DUET_PORT": str(free_port()), **(env or {})})
    return subprocess.run([DUET, *argv], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, subprocess.CompletedProcess[str]]]]:
    """Every case of :data:`REFUSALS`, run at once (each is a fresh interpreter: about 3 s of CPU)."""
    tmp = tmp_path_factory.mktemp("refusals")
    (tmp / "bad.yaml").write_text(BAD_YAML)
    (tmp / "zero-ping.yaml").write_text(yaml.safe_dump({"ping_interval": 0, "pipelines": [{"name": "x", "answer": {"model": "m"}}]}))

    def run(case: tuple[str, list[str], dict[str, str], int, str]) -> subprocess.CompletedProcess[str]:
        _, argv, env, _, _ = case
        return run_duet([arg.format(tmp=tmp) for arg in argv], tmp, {k: v.format(tmp=tmp) for k, v in env.items()})

    with ThreadPoolExecutor(4) as pool:
        results = dict(zip([case[0] for case in REFUSALS], pool.map(run, REFUSALS), strict=True))
    yield tmp, results


@pytest.mark.parametrize(("name", "code", "line"), [(case[0], case[3], case[4]) for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_a_configuration_error_is_one_line_naming_where_it_is_set(
    refusals: tuple[Path, dict[str, subprocess.CompletedProcess[str]]], name: str, code: int, line: str
) -> None:
    tmp, results = refusals
    result = results[name]
    assert (result.returncode, result.stderr.strip().splitlines()) == (code, [line.format(tmp=tmp)]), result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_version_is_the_packages(tmp_path: Path) -> None:
    result = run_duet(["--version"], tmp_path)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert (result.returncode, result.stdout) == (0, f"duet {version}\n")


def test_serve_help_lists_every_variable(tmp_path: Path) -> None:
    result = run_duet(["serve", "--help"], tmp_path)
    assert result.returncode == 0
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("  DUET_")}
    assert listed == {f"DUET_{name.upper()}" for name in EnvSettings.model_fields} | {"DUET_REASONER_API_KEY", "DUET_ANSWER_API_KEY"}
    assert "  DUET_PING_INTERVAL" in result.stdout and "(default 5.0)" in result.stdout


def test_check_reports_the_example_configuration_and_its_unset_keys(tmp_path: Path) -> None:
    """The shipped example names its cloud keys by variable: unset, each is a warning, not an error."""
    env = {k: "" for k in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY")}
    result = run_duet(["check", "--config", str(ROOT / "duet.example.yaml")], tmp_path, env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    pipelines = [line for line in lines if line.startswith("pipeline '")]
    assert pipelines[0] == ("pipeline 'duet': reasoner deepseek-r1:7b at http://localhost:11434/v1; answer qwen2.5:7b at "
                            "http://localhost:11434/v1; service tools: none; reasoning output reasoning_content")
    assert "pipeline 'qwen': no reasoner; answer qwen2.5:7b at http://localhost:11434/v1; service tools: none; reasoning output reasoning_content" in pipelines
    assert lines[len(pipelines):] == [
        "state store: memory://",
        "auth: off (0 API keys)",
        "workers: 1",
        "warning: pipeline 'duet-cloud': the reasoner's key variable DEEPSEEK_API_KEY is not set: https://api.deepseek.com/v1 will likely refuse its requests",
        "warning: pipeline 'duet-cloud': the answer's key variable OPENAI_API_KEY is not set: https://api.openai.com/v1 will likely refuse its requests",
        "pipelines: ok",
        "configuration ok",
    ]
    with_keys = run_duet(["check", "--config", str(ROOT / "duet.example.yaml")], tmp_path, {"DEEPSEEK_API_KEY": "k", "OPENAI_API_KEY": "k"})
    assert with_keys.returncode == 0 and "warning" not in with_keys.stdout


def test_the_summary_never_shows_a_secret(tmp_path: Path) -> None:
    """A Redis URL's password and the API keys stay out of the summary (the count of keys is shown)."""
    env = {"DUET_STATE_URL": "redis://:store-password@127.0.0.1:6390/2", "DUET_API_KEYS": "client-key-1,client-key-2"}
    result = run_duet(["check"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert "state store: redis://127.0.0.1:6390/2" in result.stdout.splitlines() and "auth: on (2 API keys)" in result.stdout
    assert "store-password" not in result.stdout + result.stderr and "client-key" not in result.stdout + result.stderr


def test_check_probe_asks_the_upstreams(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    """``--probe`` asks each upstream's /models (and the state store): 0 when all answer, 1 naming what did not."""
    env = {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
           "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": "a,b",
           "DUET_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
    result = run_duet(["check", "--probe"], tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-7:] == [
        "auth: on (2 API keys)", "workers: 1", "pipelines: ok", "mcp_servers: ok", "state_store: ok",
        f'upstreams: {{"{REASONER}": "ok"}}', "configuration ok, upstreams answering",
    ]
    assert len(upstream.requests_for(REASONER)) == 0  # asked /models, never for a completion

    upstream.models_reply = Reply(status=503)
    refused = run_duet(["check", "--probe"], tmp_path, env)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == ["duet: check: not ready: upstreams"]
    without_probe = run_duet(["check"], tmp_path, env)  # the upstream is not asked
    assert without_probe.returncode == 0 and without_probe.stdout.splitlines()[-1] == "configuration ok"


def test_the_startup_summary_is_in_the_log(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    log = duet.log.read_text()
    assert (f"INFO duet: pipeline 'duet': reasoner {REASONER} at {upstream.base_url}; answer {ANSWER} at {upstream.base_url}; "
            "service tools: none; reasoning output reasoning_content") in log
    assert "INFO duet: pipeline 'duet-functions': " in log and "service tools: tests.service_tools_fixtures:lookup_customer;" in log
    assert "INFO duet: auth: on (2 API keys)" in log and "INFO duet: workers: 1" in log
    assert f"INFO duet: state store: sqlite:///{duet.log.parent / 'state.db'}" in log


def test_the_benchmarks_show_why_duet_did_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make bench`` starts ``duet serve`` through bench/harness.py: a start that fails says why (its
    stderr) at once, and a ``DUET_*`` variable of the caller's never reaches it."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import harness

    monkeypatch.setenv("DUET_REASONING_OUTPUT", "bogus")  # the caller's: ignored
    port = free_port()
    with pytest.raises(RuntimeError) as refused:
        harness.start_duet(port, {"DUET_LOG_LEVEL": "verbose", "DUET_STATE_URL": "memory://"})
    assert str(refused.value) == ("duet serve did not start (exit code 2); its stderr:\n"
                                  "duet: cannot start: DUET_LOG_LEVEL=verbose: Input should be 'critical', 'error', 'warning', 'info' or 'debug'\n")


def test_check_probe_starts_the_mcp_servers(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    """An MCP server that cannot start passes the plain check (nothing is started) and fails the probe."""
    config = tmp_path / "duet.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": "with-mcp", "answer": {"base_url": upstream.base_url, "model": ANSWER},
        "tools": {"mcp": [{"name": "calc", "command": str(tmp_path / "no-such-server")}]}}]}))
    plain = run_duet(["check", "--config", str(config)], tmp_path)
    assert plain.returncode == 0 and "service tools: mcp:calc;" in plain.stdout, plain.stderr
    probed = run_duet(["check", "--probe", "--config", str(config)], tmp_path)
    assert probed.returncode == 1
    # AutoGen's MCP actor logs its own traceback first; Duet's verdict is the last line.
    assert probed.stderr.strip().splitlines()[-1] == "duet: check: not ready: mcp_servers"
    assert any(line.startswith("mcp_servers: ") and "no-such-server" in line for line in probed.stdout.splitlines()), probed.stdout
