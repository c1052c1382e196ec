"""docker-compose.yml's ``monitoring`` profile: Prometheus scraping the duet service with the scrape key
and loading the alert rules, Grafana with that Prometheus and the Duet dashboard provisioned. Resolved
by ``docker-compose config`` and checked by ``promtool check config`` (no engine runs here); every
path, port and name one file gives another is cross-checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.deploy.test_deploy import resolved
from tests.deploy.test_monitoring import promtool


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """A service's bind mounts of this checkout: path in the container -> file here."""
    found = {}
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("/"):
            found[target] = Path(source)
    return found


def test_monitoring_comes_only_with_its_profile() -> None:
    """``docker compose up`` without the profile starts neither (``config`` lists every service, each with its profiles)."""
    services = resolved()["services"]
    assert services["prometheus"]["profiles"] == services["grafana"]["profiles"] == ["monitoring"]


def test_prometheus_scrapes_the_duet_service_with_the_key_and_loads_the_alerts(tmp_path: Path) -> None:
    compose = resolved(profiles=("monitoring",))
    prometheus, duet = compose["services"]["prometheus"], compose["services"]["duet"]
    files = mounts(prometheus)
    config_file = files["/etc/prometheus/prometheus.yml"]
    assert config_file == ROOT / "deploy" / "prometheus" / "compose.yml"
    config = yaml.safe_load(config_file.read_text())
    (job,) = config["scrape_configs"]
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host == "duet" and port == duet["environment"]["DUET_PORT"]  # the service, on the port Duet listens on
    assert "ports" not in prometheus  # reached by Grafana, not published
    # The key: the compose secret, where compose mounts it (the file itself is the operator's).
    assert [secret["source"] for secret in prometheus["secrets"]] == ["duet-scrape-key"]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/run/secrets/duet-scrape-key"}
    assert compose["secrets"]["duet-scrape-key"]["file"] == str(ROOT / "deploy" / "prometheus" / "scrape-key")
    custom = resolved(profiles=("monitoring",), DUET_SCRAPE_KEY_FILE="/etc/duet/scrape-key")
    assert custom["secrets"]["duet-scrape-key"]["file"] == "/etc/duet/scrape-key"
    # The rules it loads are the checked ones, mounted beside the configuration.
    (rules,) = config["rule_files"]
    assert files[f"/etc/prometheus/{rules}"] == ROOT / "deploy" / "prometheus" / "alerts.yml"
    key = tmp_path / "token"
    key.write_text("a-scrape-key")
    job["authorization"]["credentials_file"] = str(key)
    config["rule_files"] = [str(files[f"/etc/prometheus/{rules}"])]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_grafana_has_the_prometheus_and_the_dashboard_and_no_default_password() -> None:
    compose = resolved(profiles=("monitoring",))
    grafana = compose["services"]["grafana"]
    files = mounts(grafana)
    provisioning = files["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"  # the profile's Prometheus on its default port
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "duet.yml").read_text())["providers"]
    folder = provider["options"]["path"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert files[home] == ROOT / "deploy" / "grafana" / "duet.json" and home.startswith(folder + "/")
    # The admin password is a secret file, never a default in the file.
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana-admin-password"
    assert [secret["source"] for secret in grafana["secrets"]] == ["grafana-admin-password"]
    assert grafana["ports"] == ["127.0.0.1:3000:3000/tcp"]  # on loopback, as Duet is, unless DUET_PUBLISH says otherwise
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert {"deploy/prometheus/scrape-key", "deploy/grafana/admin-password"} <= set(ignored)
