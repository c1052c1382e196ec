"""The deployment files: docker-compose.yml (resolved by ``docker-compose config``: no engine runs
here), the Dockerfile and .dockerignore (the Kubernetes kit: tests/deploy/). Each is cross-checked
against the code: every ``DUET_*`` it sets is a setting, and its ports, paths and commands are the
ones ``duet serve`` has."""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import SpecifierSet

from duet.api import EnvSettings, create_app
from duet.api.server._cli import SERVE_FLAGS, build_parser, given_flags, main
from duet.api._settings import KEY_VARIABLES
from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETTINGS = {f"DUET_{name.upper()}" for name in EnvSettings.model_fields} | set(KEY_VARIABLES.values())


def compose_config(*files: str, profiles: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose config``: the files merged, variables interpolated and the result validated
    against the Compose schema, as ``up`` would, without an engine. No inherited ``DUET_*``."""
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is required (the README's test command installs Debian's package)"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")} | env
    argv = [binary, *(f"--file={f}" for f in files or ("docker-compose.yml",)), *(f"--profile={p}" for p in profiles), "config"]
    return subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60)


def resolved(*files: str, profiles: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    result = compose_config(*files, profiles=profiles, **{"DUET_API_KEYS": "k1,k2", **env})
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)  # type: ignore[no-any-return]


def routes() -> set[str]:
    """The paths the app serves."""
    app = create_app(_config())
    return {route.path for route in app.routes}  # type: ignore[attr-defined]


def _config() -> Any:
    from duet.api import ServiceConfig
    from duet.api._settings import ServiceOptions

    return ServiceConfig([EnvSettings(_env_file=None).default_pipeline()], options=ServiceOptions(state_url="memory://"))


def test_compose_needs_api_keys() -> None:
    """Published without keys, the endpoint would be open: compose refuses to start instead."""
    result = compose_config()
    assert result.returncode != 0
    assert "set DUET_API_KEYS to the comma-separated bearer keys clients must send" in result.stderr
    assert compose_config(DUET_API_KEYS="").returncode != 0  # empty counts as unset


def test_compose_deploys_as_an_operator_needs() -> None:
    compose = resolved()
    services = compose["services"]
    assert {name: service.get("profiles") for name, service in services.items()} == {
        "ollama": None, "ollama-pull": None, "duet": None, "redis": ["redis"],  # Redis only with its profile
        "prometheus": ["monitoring"], "grafana": ["monitoring"]}  # tests/deploy/test_compose_monitoring.py
    duet, ollama, pull = services["duet"], services["ollama"], services["ollama-pull"]
    # Pinned images: no floating tag.
    for name, service in services.items():
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:v?\d+(\.\d+)+(-[a-z]+)?", image), f"{name}: {image}"
    assert duet["image"] == f"autogen-duet:{PROJECT['project']['version']}"
    # Restart policies; the pull runs once per `up`.
    assert duet["restart"] == ollama["restart"] == "unless-stopped" and pull["restart"] == "no"
    # Ollama reachable by Duet, not published; Duet published on loopback unless asked otherwise.
    assert "ports" not in ollama and "ports" not in pull
    assert duet["ports"] == ["127.0.0.1:8000:8000/tcp"]
    assert resolved(DUET_PUBLISH="0.0.0.0")["services"]["duet"]["ports"] == ["0.0.0.0:8000:8000/tcp"]
    # The state survives a recreated container: the SQLite file is in a named volume.
    environment = duet["environment"]
    state_dir = posixpath.dirname(environment["DUET_STATE_URL"].removeprefix("sqlite:///"))
    assert [f"duet-state:{state_dir}:rw"] == duet["volumes"] and "duet-state" in compose["volumes"]
    assert environment["DUET_API_KEYS"] == "k1,k2"
    # Healthy only when ready, and ready only when the models answer.
    assert re.search(r"http://127\.0\.0\.1:8000/health/ready\b", json.dumps(duet["healthcheck"]["test"]))
    assert "/health/ready" in routes()
    assert EnvSettings(ready_probe_upstreams=environment["DUET_READY_PROBE_UPSTREAMS"]).ready_probe_upstreams is True
    # A stop gives running requests their drain, and some.
    grace = int(duet["stop_grace_period"].removesuffix("s"))
    assert grace > EnvSettings(_env_file=None).shutdown_timeout
    # The pull asks for exactly the models Duet serves, and only pulls one that is missing.
    script = " ".join(pull["entrypoint"])
    assert "ollama show" in script and "|| ollama pull" in script
    assert {pull["environment"]["REASONER_MODEL"], pull["environment"]["ANSWER_MODEL"]} == {
        environment["DUET_REASONER_MODEL"], environment["DUET_ANSWER_MODEL"]}
    custom = resolved(DUET_ANSWER_MODEL="llama3.2:3b")["services"]
    assert custom["ollama-pull"]["environment"]["ANSWER_MODEL"] == custom["duet"]["environment"]["DUET_ANSWER_MODEL"] == "llama3.2:3b"
    assert duet["depends_on"] == {"ollama-pull": {"condition": "service_completed_successfully"}}
    # Every variable is a setting, and each value is one the settings accept.
    assert set(environment) <= SETTINGS, set(environment) - SETTINGS
    EnvSettings(_env_file=None, **{k.removeprefix("DUET_").lower(): v for k, v in environment.items() if k not in KEY_VARIABLES.values()})
    assert environment["DUET_REASONER_BASE_URL"] == environment["DUET_ANSWER_BASE_URL"] == "http://ollama:11434/v1"


def test_compose_profiles_and_gpu() -> None:
    """Redis comes with its profile (the store replicas share); the GPU override gives Ollama the GPUs."""
    with_redis = resolved(profiles=("redis",), DUET_STATE_URL="redis://redis:6379/0")["services"]
    assert with_redis["redis"]["image"].startswith("redis:") and with_redis["redis"]["restart"] == "unless-stopped"
    assert with_redis["duet"]["environment"]["DUET_STATE_URL"] == "redis://redis:6379/0"
    gpu = resolved("docker-compose.yml", "deploy/compose.gpu.yml")["services"]["ollama"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"] == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert "deploy" not in resolved()["services"]["ollama"]


def test_dockerignore_keeps_the_build_context_to_what_the_image_copies() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]

    def ignored(path: str) -> bool:  # Docker's rule: the last matching pattern wins
        verdict = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or fnmatch.fnmatch(path, bare + "/*") or fnmatch.fnmatch(path, bare.removeprefix("**/")):
                verdict = not negated
        return verdict

    image = read_dockerfile(ROOT / "Dockerfile")
    for source in image.placed.values():
        assert not ignored(source.rstrip("/")), source
        assert not ignored(source.rstrip("/") + "/x.py") or not (ROOT / source).is_dir(), source
    for heavy in (".venv", ".venv/lib/x.py", ".git", "tests/test_deploy.py", ".duet/state.db", "api/__pycache__/x.pyc"):
        assert ignored(heavy), heavy


def test_docker_compose_and_the_dockerfile_match_the_code() -> None:
    """What the files build and run is this repository's package and its ``duet serve``, on the port
    the settings give."""
    compose = resolved()
    duet = compose["services"]["duet"]
    names = duet["environment"]
    assert int(names["DUET_PORT"]) == 8000 and names["DUET_HOST"] == "0.0.0.0"
    project = PROJECT
    scripts = project["project"]["scripts"]
    assert duet["build"]["context"] == str(ROOT) and duet["command"][0] in scripts
    assert build_parser().parse_args(duet["command"][1:]).command == "serve"

    image = read_dockerfile(ROOT / "Dockerfile")
    python = re.fullmatch(r"python:(\d+\.\d+)(-[a-z]+)?", image.base)
    assert python and SpecifierSet(project["project"]["requires-python"]).contains(python.group(1)), image.base
    for source in image.placed.values():
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is not in the repository"
    # It installs this repository's package, from the source it copied, with the pinned versions.
    [(build_dir, arguments)] = image.installs
    targets, constraints = pip_install_targets(arguments)
    assert targets == ["."] and constraints == ["constraints.txt"]
    setuptools = project["tool"]["setuptools"]
    folders = [setuptools["package-dir"].get(package, package.replace(".", "/")) for package in setuptools["packages"]
               if package in setuptools["package-dir"] or "." not in package]  # a subpackage comes with its folder
    for needed in ["pyproject.toml", project["project"]["readme"], *constraints, *folders]:
        assert image.placed.get(posixpath.join(build_dir, needed)) == needed, f"the build needs {needed}"
    # It runs the installed package: from a directory without the source, which would shadow it.
    assert build_dir in image.removed and not image.workdir.startswith(build_dir)
    assert not [path for path in image.placed if path.startswith(image.workdir.rstrip("/") + "/")]
    # Its command is the package's console script, `duet serve`, on the port compose maps and probes.
    script, *argv = image.command
    module, function = scripts[script].split(":")
    assert getattr(importlib.import_module(module), function) is main
    args = build_parser().parse_args(argv)
    served = EnvSettings(**given_flags(args, *SERVE_FLAGS))
    assert args.command == "serve" and served.host == "0.0.0.0"
    assert image.exposed == [served.port] == [EnvSettings.model_fields["port"].default] == [int(names["DUET_PORT"])]
    assert [int(mapping.removesuffix("/tcp").split(":")[-1]) for mapping in duet["ports"]] == [served.port]
    assert re.search(rf"127\.0\.0\.1:{served.port}/health/ready\b", json.dumps(duet["healthcheck"]["test"]))


@dataclass
class DockerImage:
    """What a Dockerfile builds, as far as the test above reads it (paths are in the image)."""

    base: str = ""
    placed: dict[str, str] = dataclass_field(default_factory=dict)  # image path: the repository path copied there
    installs: list[tuple[str, list[str]]] = dataclass_field(default_factory=list)  # (working directory, pip install arguments)
    removed: list[str] = dataclass_field(default_factory=list)
    workdir: str = "/"
    exposed: list[int] = dataclass_field(default_factory=list)
    entrypoint: list[str] = dataclass_field(default_factory=list)
    cmd: list[str] = dataclass_field(default_factory=list)

    @property
    def command(self) -> list[str]:
        return [*self.entrypoint, *self.cmd]


def read_dockerfile(path: Path) -> DockerImage:
    image = DockerImage()
    lines: list[str] = []
    continued = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not continued and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            continued += stripped[:-1] + " "
        else:
            lines.append(continued + stripped)
            continued = ""
    for line in lines:
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            image.base = arguments.split()[0]
        elif instruction == "WORKDIR":
            image.workdir = posixpath.normpath(posixpath.join(image.workdir, arguments.strip()))
        elif instruction == "COPY":
            *sources, target = shlex.split(arguments)
            assert not [s for s in sources if s.startswith("--")], "everything is copied from the repository"
            target = posixpath.normpath(posixpath.join(image.workdir, target))
            for source in sources:
                into_directory = len(sources) > 1 or arguments.rstrip().endswith("/")
                image.placed[posixpath.join(target, posixpath.basename(source)) if into_directory else target] = source
        elif instruction == "RUN":
            for command in re.split(r"&&|;", arguments):
                words = shlex.split(command)
                if "pip" in words[:3] and "install" in words:
                    image.installs.append((image.workdir, words[words.index("install") + 1:]))
                elif words[:2] == ["rm", "-rf"]:
                    image.removed.extend(words[2:])
        elif instruction == "EXPOSE":
            image.exposed.extend(int(port.split("/")[0]) for port in arguments.split())
        elif instruction in ("CMD", "ENTRYPOINT"):
            assert arguments.startswith("["), "exec form: signals reach duet itself, not a shell"
            setattr(image, instruction.lower(), json.loads(arguments))
    return image


def pip_install_targets(arguments: list[str]) -> tuple[list[str], list[str]]:
    """What ``pip install`` installs, and the constraint files it applies."""
    targets: list[str] = []
    constraints: list[str] = []
    words = iter(arguments)
    for word in words:
        if word in ("-c", "--constraint"):
            constraints.append(next(words))
        elif word in ("-r", "--requirement", "-e", "--editable"):
            targets.append(f"{word} {next(words)}")
        elif not word.startswith("-"):
            targets.append(word)
    return targets, constraints
