"""The Kubernetes kit (deploy/kubernetes: a base, two overlays, the Prometheus Operator's objects),
offline: ``kubectl kustomize`` renders each overlay; every object is validated against the Kubernetes
API's schemas (kubernetes-validate, strict) or, for the Prometheus Operator's kinds, against its CRDs'
models (cloudcoil-models-prometheus-operator); and the objects are cross-checked against each other
and against the code (references resolve, variables expand, selectors select, the settings are
settings, the probes are routes, the autoscaler's metrics are ones Duet exports)."""

from __future__ import annotations

import copy
import re
import tomllib
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator
from pydantic import BaseModel

from duet.api import EnvSettings
from duet.api.server._cli import build_parser
from tests.conftest import ROOT
from tests.deploy._kit import (DEPLOY, KUBERNETES, OVERLAYS, SETTINGS, by_name, exported_metrics, load_yaml,
                               rendered, routes)

KUBERNETES_VERSION = "1.33"  # the oldest release still supported upstream when these were written
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPERATOR_KINDS: dict[str, type[BaseModel]] = {
    "PodMonitor": prometheus_operator.PodMonitor, "ServiceMonitor": prometheus_operator.ServiceMonitor,
    "PrometheusRule": prometheus_operator.PrometheusRule}
POD_OWNERS = ("Deployment", "StatefulSet", "Job")
EXPANSION = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def pods(documents: tuple[dict[str, Any], ...]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(owner, pod template) for every object that runs pods."""
    return [(d, d["spec"]["template"]) for d in documents if d["kind"] in POD_OWNERS]


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def strictly_valid(model: type[BaseModel], document: dict[str, Any]) -> list[str]:
    """The fields of ``document`` the model does not know (its models ignore unknown fields: compare
    what it read back with what it was given)."""
    read = model.model_validate(document).model_dump(by_alias=True, exclude_unset=True, mode="json")
    unknown: list[str] = []

    def compare(given: Any, kept: Any, path: str) -> None:
        if isinstance(given, dict):
            for key, value in given.items():
                if not isinstance(kept, dict) or key not in kept:
                    unknown.append(f"{path}.{key}")
                else:
                    compare(value, kept[key], f"{path}.{key}")
        elif isinstance(given, list):
            if not isinstance(kept, list) or len(kept) != len(given):
                unknown.append(path)
                return
            for index, (value, kept_value) in enumerate(zip(given, kept, strict=True)):
                compare(value, kept_value, f"{path}[{index}]")

    compare(document, read, document["kind"])
    return unknown


def validate(document: dict[str, Any]) -> None:
    """Raises, naming the field, when the API server would refuse the object."""
    model = OPERATOR_KINDS.get(document["kind"])
    if model is None:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        return
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    unknown = strictly_valid(model, document)
    if unknown:
        raise ValueError(f"unknown fields: {unknown}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_objects_the_api_accepts(overlay: str) -> None:
    documents = rendered(f"overlays/{overlay}")
    for document in documents:
        validate(document)
    names = [(d["kind"], d["metadata"]["name"]) for d in documents]
    assert len(names) == len(set(names)), "an object is defined twice"
    kinds = {kind for kind, _ in names}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
            "ServiceAccount", "ConfigMap", "Secret", "StatefulSet"} <= kinds
    assert ("Deployment", "ollama") in names and ("Service", "ollama") in names  # the model server


def test_the_validators_refuse_what_the_api_would() -> None:
    """A misspelt field, a port given as text, an unknown field in a PodMonitor: each is refused."""
    documents = by_name(rendered("overlays/production"))
    deployment = documents["Deployment", "duet"]
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    monitor = copy.deepcopy(documents["PodMonitor", "duet"])
    monitor["spec"]["podMetricsEndpoints"][0]["bearerTokenSecrett"] = {"name": "x", "key": "y"}
    rule = copy.deepcopy(documents["PrometheusRule", "duet"])
    rule["spec"]["groups"][0]["rules"][0]["expresion"] = "up"
    for broken in (misspelt, wrong_type, monitor, rule):
        with pytest.raises((kubernetes_validate.ValidationError, ValueError)):
            validate(broken)


def unresolved_references(documents: tuple[dict[str, Any], ...]) -> list[str]:
    """Every Secret, ConfigMap (and key), PersistentVolumeClaim and ServiceAccount a pod names that the
    rendered set does not define; and every ``$(VAR)`` not defined before its use in the container."""
    objects = by_name(documents)

    def data(kind: str, name: str) -> set[str] | None:
        found = objects.get((kind, name))
        return None if found is None else set(found.get("data", {})) | set(found.get("stringData", {}))

    missing: list[str] = []
    for owner, template in pods(documents):
        where = f"{owner['kind']}/{owner['metadata']['name']}"
        claims = {claim["metadata"]["name"] for claim in owner["spec"].get("volumeClaimTemplates", [])}
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume and data("ConfigMap", volume["configMap"]["name"]) is None:
                missing.append(f"{where}: ConfigMap {volume['configMap']['name']}")
            if "persistentVolumeClaim" in volume and ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) not in objects:
                missing.append(f"{where}: PersistentVolumeClaim {volume['persistentVolumeClaim']['claimName']}")
        account = template["spec"].get("serviceAccountName")
        if account and ("ServiceAccount", account) not in objects:
            missing.append(f"{where}: ServiceAccount {account}")
        for container in containers(template):
            mounts = {mount["name"] for mount in container.get("volumeMounts", [])}
            volumes = {volume["name"] for volume in template["spec"].get("volumes", [])} | claims
            missing += [f"{where}: volume {name}" for name in mounts - volumes]
            defined: set[str] = set()
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef") or source["secretRef"]
                keys = data("ConfigMap" if "configMapRef" in source else "Secret", ref["name"])
                if keys is None:
                    missing.append(f"{where}: envFrom {ref['name']}")
                defined |= keys or set()
            for variable in container.get("env", []):
                for name in EXPANSION.findall(variable.get("value", "")):
                    if name not in defined:
                        missing.append(f"{where}: {variable['name']} expands $({name}) before it is defined")
                ref = variable.get("valueFrom", {})
                for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                    if key in ref and ref[key]["key"] not in (data(kind, ref[key]["name"]) or set()):
                        missing.append(f"{where}: {variable['name']} from {kind} {ref[key]['name']}/{ref[key]['key']}")
                defined.add(variable["name"])
    return missing


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_resolves_and_every_variable_expands(overlay: str) -> None:
    documents = rendered(f"overlays/{overlay}")
    assert unresolved_references(documents) == []
    # The check sees what Kubernetes would not expand: a variable moved before the one it uses.
    broken = copy.deepcopy(documents)
    deployment = next(d for d in broken if d["kind"] == "Deployment" and d["metadata"]["name"] == "duet")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    env.insert(0, env.pop(next(i for i, v in enumerate(env) if v["name"] == "DUET_STATE_URL")))
    assert unresolved_references(broken) == [
        "Deployment/duet: DUET_STATE_URL expands $(REDIS_PASSWORD) before it is defined"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_locked_down(overlay: str) -> None:
    """Non-root, no privilege escalation, no capabilities, a read-only root, the default seccomp
    profile, no API token, and bounded memory: every pod and container of the kit."""
    image_user = dockerfile_user()
    for owner, template in pods(rendered(f"overlays/{overlay}")):
        where = f"{owner['kind']}/{owner['metadata']['name']}"
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["runAsUser"] > 0 and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec.get("automountServiceAccountToken") is False, where
        for container in containers(template):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], where
            assert not re.search(r":latest$|^[^:]+$", container["image"]), f"{where}: unpinned image {container['image']}"
        if owner["metadata"]["name"] == "duet":
            assert spec["securityContext"]["runAsUser"] == image_user  # the image's own user


def dockerfile_user() -> int:
    """The Dockerfile's last USER, which must be numeric (runAsNonRoot cannot check a name)."""
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert users, "the image runs as root"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) > 0, users[-1]
    return int(user)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_select_and_ports_exist(overlay: str) -> None:
    """Services, disruption budgets, network policies and the PodMonitor select pods of the kit, on
    ports those pods have; every budget still lets a node drain."""
    documents = rendered(f"overlays/{overlay}")
    templates = pods(documents)

    def selected(selector: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        found = [(owner, t) for owner, t in templates if selects(selector, t["metadata"]["labels"])]
        assert found, f"nothing has the labels {selector}"
        return found

    def port_names(template: dict[str, Any]) -> set[Any]:
        return {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])} | {
            p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}

    for document in documents:
        kind, spec = document["kind"], document.get("spec", {})
        if kind == "Service":
            for _, template in selected(spec["selector"]):
                assert {p["targetPort"] for p in spec["ports"]} <= port_names(template), document["metadata"]["name"]
        elif kind == "PodDisruptionBudget":
            [(owner, _)] = selected(spec["selector"]["matchLabels"])
            replicas = owner["spec"]["replicas"]
            assert spec.get("maxUnavailable", 0) >= 1 or spec["minAvailable"] < replicas, document["metadata"]["name"]
        elif kind == "NetworkPolicy":
            selected(spec["podSelector"]["matchLabels"])
            for rule in [*spec.get("ingress", []), *spec.get("egress", [])]:
                for peer in [*rule.get("from", []), *rule.get("to", [])]:
                    selected(peer["podSelector"]["matchLabels"])
        elif kind == "PodMonitor":
            for _, template in selected(spec["selector"]["matchLabels"]):
                assert {e["port"] for e in spec["podMetricsEndpoints"]} <= port_names(template)


def duet_container(documents: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    deployment = by_name(documents)["Deployment", "duet"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, deployment["spec"]["template"], container


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_duet_runs_as_the_code_expects(overlay: str) -> None:
    """The image and command are this package's ``duet serve``; every variable is a setting with a value
    the settings accept; the probes are routes the app serves; a stop leaves time for the drain."""
    documents = rendered(f"overlays/{overlay}")
    objects = by_name(documents)
    settings = objects["ConfigMap", "duet-settings"]["data"]
    deployment, pod, container = duet_container(documents)
    variables = {v["name"]: v for v in container["env"]}
    duet_variables = {name for name in [*settings, *variables] if name.startswith("DUET_")}
    assert duet_variables <= SETTINGS, duet_variables - SETTINGS
    assert not set(settings) & set(variables)
    env = EnvSettings(_env_file=None, **{k.removeprefix("DUET_").lower(): v for k, v in settings.items()})
    assert env.host == "0.0.0.0" and env.workers == 1
    assert container["image"] == f"autogen-duet:{PROJECT['project']['version']}"
    assert container["command"][0] in PROJECT["project"]["scripts"]
    assert build_parser().parse_args(container["command"][1:]).command == "serve"
    assert [ref["configMapRef"]["name"] for ref in container["envFrom"]] == ["duet-settings"]
    # The scrape key is one of the keys Duet accepts: clients' keys and it, each from its Secret.
    assert variables["DUET_API_KEYS"]["value"] == "$(CLIENT_API_KEYS),$(METRICS_SCRAPE_KEY)"
    assert variables["METRICS_SCRAPE_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "duet-metrics-scrape", "key": "token"}
    [port] = container["ports"]
    assert port["containerPort"] == env.port
    served = routes()
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": port["name"]} and "/health" in served
    assert container["startupProbe"]["httpGet"] == container["livenessProbe"]["httpGet"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": port["name"]} and "/health/ready" in served
    assert pod["spec"]["terminationGracePeriodSeconds"] > env.shutdown_timeout
    assert deployment["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    service = objects["Service", "duet"]
    assert service["spec"]["selector"] == pod["metadata"]["labels"] and service["spec"]["ports"][0]["targetPort"] == port["name"]
    # Replicas prefer different nodes.
    [term] = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["podAffinityTerm"]["labelSelector"]["matchLabels"], pod["metadata"]["labels"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_duet_points_at_the_model_server_of_the_kit(overlay: str) -> None:
    objects = by_name(rendered(f"overlays/{overlay}"))
    settings = objects["ConfigMap", "duet-settings"]["data"]
    ollama = objects["Service", "ollama"]
    for stage in ("REASONER", "ANSWER"):
        url = urlsplit(settings[f"DUET_{stage}_BASE_URL"])
        assert url.hostname == ollama["metadata"]["name"] and url.port == ollama["spec"]["ports"][0]["port"]
    # The model pull pulls the models Duet names, read from the same ConfigMap.
    [pull] = objects["Job", "ollama-pull"]["spec"]["template"]["spec"]["containers"]
    refs = {v["valueFrom"]["configMapKeyRef"]["key"] for v in pull["env"] if "valueFrom" in v}
    assert refs == {"DUET_REASONER_MODEL", "DUET_ANSWER_MODEL"}
    # Duet's network policy lets it reach the model server's port.
    egress = objects["NetworkPolicy", "duet"]["spec"]["egress"]
    assert any({"port": ollama["spec"]["ports"][0]["port"], "protocol": "TCP"} in rule["ports"] for rule in egress)


def state_url(documents: tuple[dict[str, Any], ...]) -> str:
    _, _, container = duet_container(documents)
    return next(v["value"] for v in container["env"] if v["name"] == "DUET_STATE_URL")


def test_single_node_keeps_the_state_in_one_redis_with_its_password() -> None:
    documents = rendered("overlays/single-node")
    objects = by_name(documents)
    url = urlsplit(state_url(documents))
    assert url.scheme == "redis" and url.password == "$(REDIS_PASSWORD)" and url.path == "/0"
    service = objects["Service", url.hostname]
    assert url.port == service["spec"]["ports"][0]["port"]
    redis = objects["StatefulSet", "duet-redis"]
    assert selects(service["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"])
    [server] = redis["spec"]["template"]["spec"]["containers"]
    script = " ".join(server["args"])
    assert "requirepass" in script and "--appendonly yes" in script and "--dir /data" in script
    assert {m["mountPath"] for m in server["volumeMounts"]} >= {"/data"}
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_production_finds_the_redis_primary_through_three_sentinels() -> None:
    """DUET_STATE_URL lists each Sentinel by its pod's stable name (the StatefulSet's headless Service),
    on the Sentinel's port, with the master name the Sentinels monitor."""
    documents = rendered("overlays/production")
    objects = by_name(documents)
    url = state_url(documents)
    found = re.fullmatch(r"redis\+sentinel://:\$\(REDIS_PASSWORD\)@([^/]+)/(\w+)/(\d+)", url)
    assert found, url
    addresses, master, database = found.group(1).split(","), found.group(2), found.group(3)
    redis = objects["StatefulSet", "duet-redis"]
    headless = objects["Service", redis["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    sentinel = next(c for c in redis["spec"]["template"]["spec"]["containers"] if c["name"] == "sentinel")
    sentinel_port = sentinel["ports"][0]["containerPort"]
    replicas = redis["spec"]["replicas"]
    assert replicas == 3 and database == "0"
    assert addresses == [f"duet-redis-{i}.{headless['metadata']['name']}:{sentinel_port}" for i in range(replicas)]
    [scripts] = [v["configMap"]["name"] for v in redis["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    script = objects["ConfigMap", scripts]["data"]["configure.sh"]  # its name carries kustomize's hash
    assert script == (KUBERNETES / "overlays" / "production" / "redis-configure.sh").read_text()
    assert f"sentinel monitor {master} %s %s 2" in script and f"sentinel auth-pass {master}" in script
    assert f"get-master-addr-by-name {master}" in script
    init = redis["spec"]["template"]["spec"]["initContainers"][0]
    assert init["command"] == ["/bin/sh", "/scripts/configure.sh"] and "REDIS_SELF" not in {v["name"] for v in init["env"]}
    # The Redis pods are spread over nodes (required), and a drain keeps the Sentinels' quorum.
    anti = redis["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert objects["PodDisruptionBudget", "duet-redis"]["spec"]["minAvailable"] == 2
    # Duet's pods may reach Redis and the Sentinels; the set reaches itself (replication, gossip).
    egress_ports = {p["port"] for rule in objects["NetworkPolicy", "duet"]["spec"]["egress"] for p in rule["ports"]}
    assert {6379, sentinel_port} <= egress_ports
    # More replicas for Duet, and the Operator's objects.
    assert objects["HorizontalPodAutoscaler", "duet"]["spec"]["minReplicas"] >= 3
    assert objects["Deployment", "duet"]["spec"]["replicas"] >= 3
    assert ("PodMonitor", "duet") in objects and ("PrometheusRule", "duet") in objects


def test_the_autoscaler_reads_metrics_duet_exports_through_the_adapter() -> None:
    """HPA metric → a Prometheus Adapter rule serving it per pod → a series Duet exports, with the
    namespace and pod labels the scrape configurations give."""
    objects = by_name(rendered("overlays/production"))
    hpa = objects["HorizontalPodAutoscaler", "duet"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "duet"}
    settings = EnvSettings(_env_file=None, max_concurrent_requests=objects["ConfigMap", "duet-settings"]["data"]["DUET_MAX_CONCURRENT_REQUESTS"])
    rules = load_yaml(DEPLOY / "prometheus" / "adapter-values.yaml")["rules"]["custom"]
    served = {rule["name"]["as"]: rule for rule in rules}
    exported = exported_metrics()
    for metric in hpa["metrics"]:
        assert metric["type"] == "Pods"
        rule = served[metric["pods"]["metric"]["name"]]
        series = re.match(r"(\w+)\{", rule["seriesQuery"])
        assert series and series.group(1) in exported and re.fullmatch(rule["name"]["matches"], series.group(1))
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"] and "by (<<.GroupBy>>)" in rule["metricsQuery"]
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"]["averageValue"] for m in hpa["metrics"]}
    assert targets["duet_saturation_ratio"] == "500m"  # half the cap
    assert int(targets["duet_requests_in_flight"]) < settings.max_concurrent_requests
    assert hpa["minReplicas"] >= 2  # a follow-up can always reach another replica while one restarts


def test_the_operator_objects_match_the_plain_files() -> None:
    """The PrometheusRule carries deploy/prometheus/alerts.yml's groups; the PodMonitor scrapes the
    route Duet serves with the key the Deployment adds to DUET_API_KEYS."""
    objects = by_name(rendered("monitoring"))
    assert objects["PrometheusRule", "duet"]["spec"]["groups"] == load_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"]
    [endpoint] = objects["PodMonitor", "duet"]["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] in routes() and endpoint["authorization"]["type"] == "Bearer"
    assert endpoint["authorization"]["credentials"] == {"name": "duet-metrics-scrape", "key": "token"}
    _, _, container = duet_container(rendered("overlays/production"))
    keys = {v["name"]: v for v in container["env"]}
    assert keys["METRICS_SCRAPE_KEY"]["valueFrom"]["secretKeyRef"] == endpoint["authorization"]["credentials"]
