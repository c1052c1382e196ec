"""What the deployment-kit tests share: the repository's deploy/ folder, kubectl's rendering of a
kustomization, the settings Duet reads and the routes it serves, and the metric names it exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from duet.api import EnvSettings, ServiceConfig, create_app
from duet.api._settings import KEY_VARIABLES, ServiceOptions
from duet.api.observability._metrics import Metrics
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = ("single-node", "production")
SETTINGS = {f"DUET_{name.upper()}" for name in EnvSettings.model_fields} | set(KEY_VARIABLES.values())

# Metrics added by i27-runtime (issue 27's process side), by exactly these names and types; the lead
# reconciles this list with api/observability/_metrics.py at merge (then it reads them from there).
I27_RUNTIME_METRICS = {
    "duet_build_info": "gauge",
    "duet_saturation_ratio": "gauge",
    "duet_pending_body_bytes": "gauge",
    "duet_store_up": "gauge",
    "duet_process_cpu_seconds": "counter",
    "duet_process_resident_memory_bytes": "gauge",
    "duet_process_open_fds": "gauge",
}
I27_RUNTIME_LABELS = {"version", "python", "autogen", "worker"}

# The series names Prometheus stores for each metric type (prometheus-client's exposition).
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
             "gauge": ("",), "info": ("_info",), "summary": ("", "_count", "_sum", "_created")}


def kubectl() -> str:
    """kubectl with kustomize v4 or later (the overlays use `patches` with targets, `labels`)."""
    binary = shutil.which("kubectl")
    assert binary, "kubectl is required (the machine image has it; Debian: kubernetes-client is too old)"
    version = subprocess.run([binary, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"Kustomize Version: v(\d+)", version)
    assert found and int(found.group(1)) >= 4, f"kubectl's kustomize is older than v4: {version}"
    return binary


@cache
def rendered(kustomization: str) -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize deploy/kubernetes/<kustomization>``: every object it would apply."""
    result = subprocess.run([kubectl(), "kustomize", str(KUBERNETES / kustomization)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return tuple(document for document in yaml.safe_load_all(result.stdout) if document)


def by_name(documents: tuple[dict[str, Any], ...]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


@cache
def routes() -> frozenset[str]:
    """The paths the app serves."""
    config = ServiceConfig([EnvSettings(_env_file=None).default_pipeline()], options=ServiceOptions(state_url="memory://"))
    return frozenset(route.path for route in create_app(config).routes)  # type: ignore[attr-defined]


@cache
def exported_metrics() -> dict[str, set[str]]:
    """Every series name Duet exports, with its labels: the metrics api/observability/_metrics.py
    defines (read from a registry they are created in), and :data:`I27_RUNTIME_METRICS`."""
    metrics = Metrics(CollectorRegistry())
    # prometheus-client keeps a metric's name (without _total), type and label names in these attributes.
    families = {metric._name: (metric._type, set(metric._labelnames))
                for metric in vars(metrics).values() if isinstance(metric, MetricWrapperBase)}
    families.update({name: (kind, set(I27_RUNTIME_LABELS)) for name, kind in I27_RUNTIME_METRICS.items()})
    series: dict[str, set[str]] = {}
    for name, (kind, labels) in families.items():
        for suffix in _SUFFIXES[kind]:
            series[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
