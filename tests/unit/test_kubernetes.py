"""deploy/kubernetes: rendered as `kubectl apply -k` would (tests.support.kustomize), then
checked against the Kubernetes schemas (kubernetes-validate ships them: no network) and
against the commands, probes, grace periods and queues the rest of the project defines.

Each check is a function; the last tests break a copy of the manifests and see it fail.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from api.health import CHECK_TIMEOUT_S
from api.server import options as gunicorn_options
from jarvis_agents.config import Settings
from mcp_server.server import GRACEFUL_S as MCP_GRACEFUL_S
from tests.conftest import ROOT
from tests.support.kustomize import containers, pod_spec, render

Obj = dict[str, Any]
DEPLOY = ROOT / "deploy" / "kubernetes"
RENDERS = {"full": DEPLOY, "base": DEPLOY / "base", "example": DEPLOY / "overlays" / "example"}
IMAGES = {"full": "jarvis-agents:latest", "base": "jarvis-agents:latest",
          "example": "registry.example.com/jarvis-agents:0.1.0"}
SECRET_KEYS = {"DATABASE_URL", "REDIS_URL", "JARVIS_WEBHOOK_SECRET", "OPENAI_API_KEY"}
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())
# After JARVIS_SHUTDOWN_GRACE a worker stops its agents and hands them back (a write may
# be retried through a database blip meanwhile); killed before, they count as lost.
MARGIN_S = (15, 60)


# --- what the rendered objects say ------------------------------------------------------------


def component(objects: list[Obj], kind: str, name: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind
            and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == name]


def environment(container: Obj, objects: list[Obj]) -> dict[str, str]:
    """The variables a container starts with (a Secret's keys with their example values)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            found = [o for o in objects if o["kind"] == "ConfigMap"
                     and o["metadata"]["name"] == source["configMapRef"]["name"]]
            assert found, f"no ConfigMap {source['configMapRef']['name']}"
            env |= found[0]["data"]
        else:
            assert source["secretRef"]["name"] == example_secret()["metadata"]["name"]
            env |= example_secret()["stringData"]
    return env | {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def example_secret() -> Obj:
    return yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())


def procfile(entry: str) -> list[str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    line = next(line for line in lines if line.startswith(f"{entry}:"))
    return shlex.split(line.partition(":")[2])


def container(obj: Obj) -> Obj:
    (only,) = pod_spec(obj)["containers"]
    return only


def worker_models(worker: Obj) -> list[str]:
    """The models a worker takes (`--models A,B`); [] for a default worker."""
    command = container(worker)["command"] + container(worker).get("args", [])
    assert command[:2] == ["jarvis-agents", "worker"], command
    rest = command[2:]
    if "--models" not in rest:
        return []
    assert rest.index("--models") + 1 < len(rest), "--models needs a value"
    return rest[rest.index("--models") + 1].split(",")


def query_models(query: str) -> list[str]:
    """The models a PromQL query selects: `model="A"` or `model=~"A|B"`; [] for none."""
    match = re.search(r'model(=~?)"([^"]*)"', query)
    if match is None:
        return []
    if match.group(1) == "=":
        return [match.group(2)]
    return [name.replace("\\.", ".") for name in match.group(2).split("|")]


# --- the checks -------------------------------------------------------------------------------


def strict(properties: Obj, required: tuple[str, ...] = ()) -> Obj:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


INT, STR, BOOL = {"type": "integer"}, {"type": "string"}, {"type": "boolean"}
NUMBER = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
HPA_POLICY = strict({"type": {"enum": ["Pods", "Percent"]}, "value": INT, "periodSeconds": INT},
                    ("type", "value", "periodSeconds"))
HPA_RULES = strict({"stabilizationWindowSeconds": INT,
                    "policies": {"type": "array", "items": HPA_POLICY},
                    "selectPolicy": {"enum": ["Max", "Min", "Disabled"]}})
PROMETHEUS = strict({**dict.fromkeys(("serverAddress", "query", "namespace", "customHeaders",
                                      "ignoreNullValues", "unsafeSsl", "queryParameters"), STR),
                     "threshold": NUMBER, "activationThreshold": NUMBER},
                    ("serverAddress", "query", "threshold"))
TRIGGER = strict({"type": STR, "name": STR, "metadata": {"type": "object"},
                  "useCachedMetrics": BOOL,
                  "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                  "authenticationRef": strict({"name": STR, "kind": STR}, ("name",))},
                 ("type", "metadata"))
# KEDA's ScaledObject (keda.sh/v1alpha1), its documented fields; strict, as the API server is not.
SCALED_OBJECT = strict({
    "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"},
    "metadata": {"type": "object", "required": ["name"]},
    "spec": strict({
        "scaleTargetRef": strict({"name": STR, "kind": STR, "apiVersion": STR,
                                  "envSourceContainerName": STR}, ("name",)),
        **dict.fromkeys(("pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
                         "idleReplicaCount", "minReplicaCount", "maxReplicaCount"), INT),
        "fallback": strict({"failureThreshold": INT, "replicas": INT},
                           ("failureThreshold", "replicas")),
        "advanced": strict({
            "restoreToOriginalReplicaCount": BOOL,
            "horizontalPodAutoscalerConfig": strict({"name": STR, "behavior": strict(
                {"scaleUp": HPA_RULES, "scaleDown": HPA_RULES})}),
        }),
        "triggers": {"type": "array", "minItems": 1, "items": {
            **TRIGGER,
            "if": {"properties": {"type": {"const": "prometheus"}}},
            "then": {"properties": {"metadata": PROMETHEUS}},
        }},
    }, ("scaleTargetRef", "triggers")),
}, ("apiVersion", "kind", "metadata", "spec"))


def check_schemas(objects: list[Obj]) -> None:
    for obj in objects:
        try:
            if obj["kind"] == "ScaledObject":  # a KEDA resource: no schema in the package
                jsonschema.validate(obj, SCALED_OBJECT)
            else:  # an unknown kind raises SchemaNotFoundError
                for version in KUBERNETES_VERSIONS:
                    kubernetes_validate.validate(obj, version, strict=True)
        except jsonschema.ValidationError as exc:  # its str() is the whole schema
            where = ".".join(map(str, exc.absolute_path))
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: {where}: {exc.message}")


def check_api(objects: list[Obj]) -> None:
    (api,) = component(objects, "Deployment", "api")
    server = container(api)
    assert server["command"] == procfile("web")
    port = next(p for p in server["ports"] if p["name"] == "http")["containerPort"]
    assert environment(server, objects)["PORT"] == str(port)
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert server.get(probe, {}).get("httpGet", {}).get("path") == path, probe
        assert server[probe]["httpGet"]["port"] in {"http", port}, probe
    assert server["readinessProbe"]["timeoutSeconds"] > CHECK_TIMEOUT_S, "/readyz's own bound"
    # The Service stops sending requests (preStop), then gunicorn ends the rest.
    pre_stop = int(server["lifecycle"]["preStop"]["exec"]["command"][-1])
    graceful = gunicorn_options("0.0.0.0:8000")["graceful_timeout"]
    assert pod_spec(api)["terminationGracePeriodSeconds"] >= pre_stop + graceful + 5
    (service,) = component(objects, "Service", "api")
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] in {"http", port}


def check_mcp(objects: list[Obj]) -> None:
    (mcp,) = component(objects, "Deployment", "mcp")
    server = container(mcp)
    assert server["command"] == procfile("mcp")
    port = next(p for p in server["ports"] if p["name"] == "http")["containerPort"]
    assert Settings.from_env(environment(server, objects)).mcp_server_port == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    # The Service stops sending calls (preStop), then the server ends the rest.
    pre_stop = int(server["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod_spec(mcp)["terminationGracePeriodSeconds"] >= pre_stop + MCP_GRACEFUL_S + 5
    (service,) = component(objects, "Service", "mcp")
    assert service["spec"]["selector"].items() <= mcp["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in {"http", port}
    # The API forwards its /mcp to this Service (README, MCP server).
    (api,) = component(objects, "Deployment", "api")
    forwarded = urlsplit(Settings.from_env(environment(container(api), objects)).mcp_url or "")
    assert (forwarded.hostname, forwarded.port or 80, forwarded.path) == (
        service["metadata"]["name"], service["spec"]["ports"][0]["port"], "/mcp")


def check_workers(objects: list[Obj]) -> None:
    workers = component(objects, "Deployment", "worker")
    models = [worker_models(w) for w in workers]
    assert models.count([]) == 1, "exactly one default worker (no --models); the others name theirs"
    taken = [m for ms in models for m in ms]
    assert len(taken) == len(set(taken)), f"a model in two worker Deployments: {taken}"
    default_grace = Settings.from_env({}).shutdown_grace_s
    for worker in workers:
        name = worker["metadata"]["name"]
        assert "replicas" not in worker["spec"], f"{name}: an apply would reset what KEDA scaled"
        assert worker["spec"]["strategy"]["type"] == "Recreate", name
        env = environment(container(worker), objects)
        grace = float(env.get("JARVIS_SHUTDOWN_GRACE", default_grace))
        margin = pod_spec(worker)["terminationGracePeriodSeconds"] - grace
        assert MARGIN_S[0] <= margin <= MARGIN_S[1], (
            f"{name}: {margin:g} s beyond JARVIS_SHUTDOWN_GRACE, not {MARGIN_S[0]}-{MARGIN_S[1]}")
        # Run against a live worker: tests/integration/test_worker_probes.py.
        probe = container(worker)["livenessProbe"]["exec"]["command"]
        assert probe == ["jarvis-agents", "ping-worker"], name


def check_scaled_objects(objects: list[Obj]) -> None:
    workers = {w["metadata"]["name"]: w for w in component(objects, "Deployment", "worker")}
    scaled = [o for o in objects if o["kind"] == "ScaledObject"]
    targets = sorted(s["spec"]["scaleTargetRef"]["name"] for s in scaled)
    assert targets == sorted(workers), "one ScaledObject per worker Deployment"
    for scaler in scaled:
        worker = workers[scaler["spec"]["scaleTargetRef"]["name"]]
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        assert "jarvis_queue_depth" in trigger["metadata"]["query"]
        assert query_models(trigger["metadata"]["query"]) == worker_models(worker), (
            f"{scaler['metadata']['name']} scales on the queue of other models than its worker's")
        spec = scaler["spec"]
        assert spec.get("minReplicaCount", 0) <= spec["maxReplicaCount"]
        if not worker_models(worker):  # it also runs the sweeper and the webhook dispatcher
            assert spec.get("minReplicaCount", 0) >= 1


def check_pods(objects: list[Obj], image: str) -> None:
    uid = int(re.search(r"--uid (\d+)", (ROOT / "Dockerfile").read_text()).group(1))
    pods = [o for o in objects if pod_spec(o)]
    for obj in pods:
        name, spec = obj["metadata"]["name"], pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] == uid, f"{name}: the image's user is {uid}"
        for each in containers(obj):
            assert each["image"] == image, name
            assert each["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert {"cpu", "memory"} <= each["resources"]["requests"].keys(), name
            assert "memory" in each["resources"]["limits"], name
            environment(each, objects)  # every ConfigMap and Secret it names exists
    deployments = [o for o in pods if o["kind"] == "Deployment"]
    for one in deployments:
        selector = one["spec"]["selector"]["matchLabels"].items()
        matching = [o["metadata"]["name"] for o in deployments
                    if selector <= o["spec"]["template"]["metadata"]["labels"].items()]
        assert matching == [one["metadata"]["name"]], f"{matching} share one selector"


def check_migration(objects: list[Obj]) -> None:
    (job,) = component(objects, "Job", "migrate")
    assert container(job)["command"] == procfile("release")
    # `kubectl apply -k … -l app.kubernetes.io/component=migrate` applies the Job alone.
    sources = [list(source) for source in container(job)["envFrom"]]
    assert sources == [["secretRef"]], "the migration may need nothing but the Secret"
    assert pod_spec(job)["restartPolicy"] in {"Never", "OnFailure"}


# --- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=sorted(RENDERS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, render(RENDERS[request.param])


def test_every_object_validates_against_its_schema(rendered: tuple[str, list[Obj]]) -> None:
    check_schemas(rendered[1])
    check_schemas([example_secret()])


def test_the_api_serves_on_its_port_with_both_probes(rendered: tuple[str, list[Obj]]) -> None:
    check_api(rendered[1])


def test_the_mcp_server_serves_on_its_port_and_stops_within_its_grace(
    rendered: tuple[str, list[Obj]],
) -> None:
    check_mcp(rendered[1])


def test_workers_one_default_and_one_per_model_stop_within_their_grace(
    rendered: tuple[str, list[Obj]],
) -> None:
    check_workers(rendered[1])
    assert len(component(rendered[1], "Deployment", "worker")) >= 2


def test_keda_scales_each_worker_on_its_models_queue(rendered: tuple[str, list[Obj]]) -> None:
    name, objects = rendered
    if name == "base":
        assert not [o for o in objects if o["kind"] == "ScaledObject"], "base runs without KEDA"
    else:
        check_scaled_objects(objects)


def test_pods_run_the_image_as_a_non_root_user(rendered: tuple[str, list[Obj]]) -> None:
    check_pods(rendered[1], IMAGES[rendered[0]])


def test_the_migration_job_runs_alone_with_the_secret(rendered: tuple[str, list[Obj]]) -> None:
    check_migration(rendered[1])


def test_the_example_overlay_moves_everything_to_its_namespace() -> None:
    assert {o["metadata"].get("namespace") for o in render(RENDERS["example"])} == {"jarvis"}


def test_the_example_secret_holds_placeholders_for_every_secret() -> None:
    secret = example_secret()
    assert set(secret["stringData"]) == SECRET_KEYS
    assert all("REPLACE-ME" in value for value in secret["stringData"].values())
    for directory in RENDERS.values():  # created by hand: `apply -k` must never overwrite it
        assert secret["metadata"]["name"] not in {
            o["metadata"]["name"] for o in render(directory) if o["kind"] == "Secret"}


def test_the_configuration_names_documented_settings() -> None:
    readme = (ROOT / "README.md").read_text()
    config_map = next(o for o in render(RENDERS["base"]) if o["kind"] == "ConfigMap")
    for key in config_map["data"]:
        assert f"`{key}`" in readme, f"{key} is not in the README's configuration"
    assert not SECRET_KEYS & set(config_map["data"]), "secrets belong in the Secret"


def test_the_readme_shows_the_apply_and_its_files() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "kubectl apply -k deploy/kubernetes" in readme
    for path in set(re.findall(r"deploy/kubernetes[\w./-]*", readme)):
        assert (ROOT / path.rstrip(".")).exists(), f"the README names {path}, which does not exist"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("name", sorted(RENDERS))
def test_the_renderer_agrees_with_kubectl_kustomize(name: str) -> None:
    result = subprocess.run(["kubectl", "kustomize", str(RENDERS[name])],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # kustomize suffixes generated names with a hash of their contents; this renderer does not.
    unhashed = re.sub(r"\b(jarvis-agents)-[a-z0-9]{10}\b", r"\1", result.stdout)
    key = lambda o: (o["kind"], o["metadata"]["name"])
    assert sorted(yaml.safe_load_all(unhashed), key=key) == sorted(render(RENDERS[name]), key=key)


def api(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["metadata"]["name"] == "jarvis-agents-api")


def mcp(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["metadata"]["name"] == "jarvis-agents-mcp")


def model_worker(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["metadata"]["name"] == "jarvis-agents-worker-llama3-2")


def config(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "ConfigMap")


BREAKAGES: dict[str, tuple[Callable[[list[Obj]], object], Callable[[list[Obj]], None]]] = {
    "a misspelt field": (lambda o: api(o)["spec"].update(replica=3), check_schemas),
    "a misspelt KEDA field": (
        lambda o: next(s for s in o if s["kind"] == "ScaledObject")["spec"].update(minReplicas=0),
        check_schemas),
    "a readiness probe on a missing path": (
        lambda o: container(api(o))["readinessProbe"]["httpGet"].update(path="/ready"), check_api),
    "no liveness probe": (lambda o: container(api(o)).pop("livenessProbe"), check_api),
    "an MCP server on another port than it listens on": (
        lambda o: container(mcp(o))["ports"][0].update(containerPort=8000), check_mcp),
    "an MCP server killed before its calls end": (
        lambda o: pod_spec(mcp(o)).update(terminationGracePeriodSeconds=10), check_mcp),
    "a model worker without --models": (
        lambda o: container(model_worker(o)).update(command=["jarvis-agents", "worker"]),
        check_workers),
    "a longer JARVIS_SHUTDOWN_GRACE alone": (
        lambda o: config(o)["data"].update(JARVIS_SHUTDOWN_GRACE="45"), check_workers),
    "a grace period shorter than the shutdown grace": (
        lambda o: pod_spec(model_worker(o)).update(terminationGracePeriodSeconds=20),
        check_workers),
    "a worker scaled on another model's queue": (
        lambda o: container(model_worker(o))["command"].__setitem__(3, "qwen2.5"),
        check_scaled_objects),
    "a copied worker that kept the label": (
        lambda o: model_worker(o)["spec"]["template"]["metadata"]["labels"].update(
            {"jarvis-agents/worker": "default"}),
        lambda objects: check_pods(objects, IMAGES["full"])),
    "a pod that may run as root": (
        lambda o: pod_spec(api(o))["securityContext"].update(runAsNonRoot=False),
        lambda objects: check_pods(objects, IMAGES["full"])),
    "a migration that needs the ConfigMap": (
        lambda o: container(component(o, "Job", "migrate")[0])["envFrom"].append(
            {"configMapRef": {"name": "jarvis-agents"}}),
        check_migration),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_manifest_fails_its_check(breakage: str) -> None:
    objects = render(DEPLOY)
    break_it, check = BREAKAGES[breakage]
    check(copy.deepcopy(objects))  # the intact one passes
    break_it(objects)
    with pytest.raises(AssertionError):
        check(objects)


def test_the_compose_files_model_worker_runs_when_uncommented() -> None:
    lines = (ROOT / "docker-compose.yml").read_text().splitlines()
    start = lines.index("  # worker-llama:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  #   "))
    uncommented = [line.replace("  # ", "  ", 1) for line in lines[start:end]]
    text = "\n".join(lines[:start] + uncommented + lines[end:])
    services = yaml.safe_load(text)["services"]
    example = services["worker-llama"]
    assert example["command"] == ["jarvis-agents", "worker", "--models", "llama3.2"]
    assert example["environment"] == services["worker"]["environment"]
    if shutil.which("docker-compose"):  # CI installs it (.ci/run)
        result = subprocess.run(
            ["docker-compose", "-f", "-", "--project-directory", str(ROOT), "config", "--quiet"],
            input=text, check=False, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
