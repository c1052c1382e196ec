"""The monitoring files against a real Prometheus (Debian's) and a real ``duet serve``, on loopback:
deploy/prometheus/prometheus.yml's static job scrapes Duet with the scrape key (the same job without it
gets 401: down), the alert rules load and evaluate, every series Duet really exposes is one the name
checks know, and every dashboard query is PromQL the server runs."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import ANSWER, REASONER, DuetServer, free_port, stop_process
from tests.deploy._kit import DEPLOY, exported_metrics, load_yaml
from tests.scripted_upstream import ScriptedUpstream

CLIENT_KEY, SCRAPE_KEY = "client-key", "scrape-key"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$pipeline": ".*", "${datasource}": ""}


@pytest.fixture
def duet(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[DuetServer]:
    server = DuetServer([], {"DUET_API_KEYS": f"{CLIENT_KEY},{SCRAPE_KEY}", "DUET_REASONER_BASE_URL": upstream.base_url,
                             "DUET_REASONER_MODEL": REASONER, "DUET_ANSWER_BASE_URL": upstream.base_url,
                             "DUET_ANSWER_MODEL": ANSWER}, tmp_path / "duet.log")
    try:
        yield server
    finally:
        server.stop()


def prometheus_config(duet: DuetServer, key_file: Path) -> dict[str, Any]:
    """prometheus.yml's static job, aimed at the test's Duet, every second; the same job without the
    key beside it. (Debian's Prometheus has no Kubernetes discovery: that job is left out here.)"""
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(DEPLOY / "prometheus" / name) for name in config["rule_files"]]
    [job] = [job for job in config["scrape_configs"] if job["job_name"] == "duet-static"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{duet.port}"]}]
    job["authorization"]["credentials_file"] = str(key_file)
    without_key = copy.deepcopy(job)
    without_key["job_name"] = "duet-without-key"
    del without_key["authorization"]
    config["scrape_configs"] = [job, without_key]
    return config


@pytest.fixture
def prometheus(duet: DuetServer, tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (`make .venv/.test-ready` installs Debian's package)"
    key_file = tmp_path / "scrape-key"
    key_file.write_text(SCRAPE_KEY)
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(prometheus_config(duet, key_file)))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen([binary, f"--config.file={config_file}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, 60, "Prometheus ready")
        yield url
    finally:
        stop_process(process)
        log.close()


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


def query(prometheus: str, expression: str) -> dict[str, Any]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert answer["status"] == "success", (expression, answer)
    return answer["data"]  # type: ignore[no-any-return]


def scraped(prometheus: str) -> dict[str, float] | None:
    """``up`` per job, once both jobs have been scraped."""
    result = {sample["metric"]["job"]: float(sample["value"][1]) for sample in query(prometheus, "up")["result"]}
    return result if len(result) == 2 else None


def test_prometheus_scrapes_duet_with_the_key_and_runs_the_rules_and_the_dashboard(
        duet: DuetServer, prometheus: str) -> None:
    answered = httpx.post(f"{duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                          json={"model": "duet", "messages": [{"role": "user", "content": "hello"}]}, timeout=30)
    assert answered.status_code == 200, answered.text
    # With the key the target is up; without it, down (Duet answers 401: annotation-driven scraping).
    assert wait_for(lambda: scraped(prometheus), 60, "both jobs scraped") == {"duet-static": 1.0, "duet-without-key": 0.0}
    # Every series Duet exposes is one the name checks know (the counters and histograms included).
    wait_for(lambda: query(prometheus, 'duet_requests_total{job="duet-static"}')["result"], 30, "the request counted")
    names = httpx.get(f"{prometheus}/api/v1/label/__name__/values", params={"match[]": '{job="duet-static"}'},
                      timeout=10).json()["data"]
    duet_names = {name for name in names if name.startswith("duet_")}
    assert {"duet_requests_total", "duet_time_to_first_token_seconds_bucket", "duet_upstream_duration_seconds_count",
            "duet_tokens_total", "duet_requests_in_flight"} <= duet_names
    assert duet_names <= set(exported_metrics()), duet_names - set(exported_metrics())
    # The alert rules loaded and evaluate without error.
    def evaluated() -> list[dict[str, Any]] | None:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return rules if rules and all(rule["lastEvaluation"] > "0001-01-01T00:00:00Z" for rule in rules) else None
    rules = wait_for(evaluated, 30, "the rules evaluated")
    assert {rule["name"] for rule in rules} == {rule["alert"] for group in load_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"]
                                                 for rule in group["rules"]}
    assert [(rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"] == []
    # Every dashboard query runs (Grafana's variables given values).
    dashboard = json.loads((DEPLOY / "grafana" / "duet.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expression = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expression = expression.replace(variable, value)
            query(prometheus, expression)
    # The panels that matter show data after one request.
    assert query(prometheus, 'sum by (status) (rate(duet_requests_total[1m]))')["result"]
