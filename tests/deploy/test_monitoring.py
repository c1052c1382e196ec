"""What an operator looks at: the Prometheus alert rules (``promtool check rules`` and their unit tests,
``promtool test rules``), the plain Prometheus configuration (``promtool check config``), the Grafana
dashboard, and the Prometheus Adapter's rules. Every metric and label they name is one Duet exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy._kit import DEPLOY, exported_metrics, load_yaml, routes

PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "duet.json"
# Labels the scrape adds to every series (the PodMonitor, prometheus.yml's relabelling), not Duet.
TARGET_LABELS = {"job", "instance", "namespace", "pod"}
METRIC = re.compile(r"\bduet_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is required (`make .venv/.test-ready` installs Debian's prometheus package)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def unknown_names(expression: str) -> list[str]:
    """The metrics an expression reads that Duet does not export, and the labels it groups or selects
    by that none of those metrics (nor the scrape) has."""
    exported = exported_metrics()
    metrics = set(METRIC.findall(expression))
    unknown = sorted(metrics - set(exported))
    labels = set(TARGET_LABELS).union(*(exported.get(metric, set()) for metric in metrics))
    used = {label.strip() for group in GROUPING.findall(expression) for label in group.split(",") if label.strip()}
    used |= set(MATCHER.findall(expression))
    return unknown + sorted(f"label {label}" for label in used - labels - {"le"} if not label.startswith("__"))


def test_the_alert_rules_load_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check is a real one: a rule with a PromQL syntax error fails it."""
    rules = load_yaml(PROMETHEUS / "alerts.yml")
    rules["groups"][0]["rules"][0]["expr"] = "sum(rate(duet_requests_total[5m]) >"
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(rules))
    assert promtool("check", "rules", "broken.yml", cwd=tmp_path).returncode != 0


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(PROMETHEUS / "alerts.yml")["groups"] for rule in group["rules"]]


def test_the_alerts_cover_what_an_operator_must_know() -> None:
    """Error ratio, upstream errors by stage, TTFT p95, the store unavailable, saturation: each has an
    alert on the metric that tells it, a severity, a summary and a description."""
    expressions = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    needed = {"duet_requests_total": r'status=~"5\.\."', "duet_upstream_errors_total": r"by \(pipeline, stage\)",
              "duet_time_to_first_token_seconds_bucket": r"histogram_quantile\(0\.95", "duet_store_up": r"== 0",
              "duet_saturation_ratio": r">"}
    for metric, shape in needed.items():
        assert any(metric in expr and re.search(shape, expr) for expr in expressions.values()), metric
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["for"], rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]


def adapter_expressions() -> Iterator[tuple[str, str]]:
    for rule in load_yaml(PROMETHEUS / "adapter-values.yaml")["rules"]["custom"]:
        yield rule["name"]["as"], rule["seriesQuery"]


@pytest.mark.parametrize("source", ["alerts", "dashboard", "adapter"])
def test_every_metric_and_label_named_is_one_duet_exports(source: str) -> None:
    expressions = {"alerts": lambda: ((rule["alert"], rule["expr"]) for rule in alert_rules()),
                   "dashboard": dashboard_expressions, "adapter": adapter_expressions}[source]()
    problems = {where: unknown for where, expression in expressions if (unknown := unknown_names(expression))}
    assert problems == {}


def test_the_name_check_catches_a_misspelt_metric_or_label() -> None:
    # A misspelt metric has no labels either: what the expression groups by is unknown too.
    assert unknown_names('sum by (stage) (rate(duet_upstream_error_total[5m]))') == ["duet_upstream_error_total", "label stage"]
    assert unknown_names('sum by (stag) (rate(duet_upstream_errors_total{cod="500"}[5m]))') == ["label cod", "label stag"]
    assert unknown_names('histogram_quantile(0.9, sum by (le) (rate(duet_overhead_seconds_bucket[1m])))') == []


def test_the_dashboard_shows_what_the_issue_lists() -> None:
    """Requests, TTFT, Duet's overhead, per-stage upstream latency and errors, tokens per stage, tool
    calls, the store, saturation (and the processes); a well-formed Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    used = " ".join(expression for _, expression in dashboard_expressions())
    for metric in ("duet_requests_total", "duet_time_to_first_token_seconds_bucket", "duet_overhead_seconds_bucket",
                   "duet_upstream_duration_seconds_bucket", "duet_upstream_errors_total", "duet_tokens_total",
                   "duet_tool_calls_total", "duet_store_operations_total", "duet_store_up", "duet_saturation_ratio",
                   "duet_process_cpu_seconds_total", "duet_build_info"):
        assert metric in used, metric
    assert re.search(r"by \(stage[,)]", used)  # upstream figures per stage
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["description"], panel["title"]
    assert {"datasource", "pipeline"} <= {variable["name"] for variable in dashboard["templating"]["list"]}
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36


def test_the_plain_prometheus_configuration_loads(tmp_path: Path) -> None:
    """``promtool check config`` on prometheus.yml, with two changes this machine needs: Debian's
    Prometheus is built without Kubernetes discovery (its pods become a static target), and the
    scrape key's file is a temporary one. What they scrape is checked as written."""
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    kubernetes = jobs["duet"]
    assert kubernetes.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    kubernetes["static_configs"] = [{"targets": ["duet.invalid:8000"]}]
    relabelled = {rule.get("target_label") for rule in kubernetes["relabel_configs"]}
    assert {"namespace", "pod"} <= relabelled  # what the Prometheus Adapter's rules map to pods
    keep = kubernetes["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["regex"] == "duet;http"
    key = tmp_path / "token"
    key.write_text("a-scrape-key")
    for job in jobs.values():
        assert job["metrics_path"] in routes() and job["authorization"]["type"] == "Bearer"
        job["authorization"]["credentials_file"] = str(key)
    config["rule_files"] = [str(PROMETHEUS / name) for name in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
