"""deploy/kubernetes/, checked offline: every core object against Kubernetes' own schemas (kubernetes-validate,
strict: an unknown field is an error), every custom resource against a schema (kubernetes_schemas.py) written
from its published CRD's required fields and types, and the project's rules: probes on the generator's ready path,
Triton's HTTP and gRPC on loopback and behind no Service, the worker beside Triton, the autoscaler on requests
waiting, a bounded Redis, pinned images, locked-down pods."""

from __future__ import annotations

import copy
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml
from google.protobuf import text_format
from kubernetes_validate.utils import SchemaNotFoundError
from tritonclient.grpc import model_config_pb2

from tritongen.triton.lockdown import OPERATOR_KEY_ENV

from conftest import ROOT
from kubernetes_schemas import validate

MANIFESTS = ROOT / "deploy" / "kubernetes"
HELM_VALUES = MANIFESTS / "monitoring" / "prometheus-adapter-values.yaml"  # a chart's values, not a manifest
TRITON_DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # tritonserver's defaults


# --- loading and validating -------------------------------------------------------------------------------------

def manifest_files() -> list[Path]:
    return sorted(p for p in MANIFESTS.rglob("*.yaml") if p != HELM_VALUES)


@cache
def documents() -> tuple[dict, ...]:
    """Parsed once; the tests read them, and an edit works on a deep copy."""
    return tuple(doc for path in manifest_files() for doc in yaml.safe_load_all(path.read_text()) if doc)


def of_kind(kind: str) -> list[dict]:
    return [doc for doc in documents() if doc["kind"] == kind]


def named(kind: str, name: str) -> dict:
    return next(doc for doc in of_kind(kind) if doc["metadata"]["name"] == name)


# --- reading the pods -------------------------------------------------------------------------------------------

def pod_spec(deployment: str) -> dict:
    return named("Deployment", deployment)["spec"]["template"]["spec"]


def container(spec: dict, name: str) -> dict:
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


def running(module: str) -> tuple[dict, dict]:
    """(pod spec, container) of the container that runs `python -m module`."""
    for deployment in of_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for c in spec["containers"]:
            if c.get("command", [])[1:3] == ["-m", module]:
                return spec, c
    raise AssertionError(f"no container runs {module}")


def triton_container() -> tuple[dict, dict]:
    for deployment in of_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for c in spec["containers"]:
            if c["image"].rsplit("/", 1)[-1].startswith("tritongen:") and "command" not in c:  # the entrypoint
                return spec, c
    raise AssertionError("no container runs the tritongen image's entrypoint")


def flag(args: list[str], name: str) -> str | None:
    """The value tritonserver (or argparse) takes for --name: the last one given."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    values += [args[i + 1] for i, a in enumerate(args[:-1]) if a == f"--{name}"]
    return values[-1] if values else None


def triton_port(kind: str) -> int:
    _, triton = triton_container()
    return int(flag(triton.get("args", []), f"{kind}-port") or TRITON_DEFAULT_PORTS[kind])


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env", [])}


def pod_templates() -> list[dict]:
    return [d["spec"]["template"] for d in of_kind("Deployment")]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "": 1,
            "kb": 2**10, "mb": 2**20, "gb": 2**30}  # the last three: Redis' units (1024-based)


def size_bytes(text: str) -> int:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text)).groups()
    return int(float(number) * QUANTITY[unit])


# --- every object validates, and broken ones do not -------------------------------------------------------------

def test_every_manifest_validates():
    checked = {}
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                checked[f"{path.relative_to(MANIFESTS)} {doc['kind']}/{doc['metadata']['name']}"] = validate(doc)
    assert len(checked) >= 18, checked
    # Both kinds of check ran: Kubernetes' schemas on the core objects, ours on each custom resource.
    assert {"schema of InferencePool", "schema of HTTPRoute", "schema of PodMonitor"} <= set(checked.values())
    assert sum(v.startswith("kubernetes ") for v in checked.values()) >= 15


def _broken(kind: str, name: str, edit) -> dict:
    doc = copy.deepcopy(named(kind, name))
    edit(doc)
    return doc


BROKEN = {
    "string replicas": ("Deployment", "tritongen", lambda d: d["spec"].update(replicas="2")),
    "unknown container field": ("Deployment", "tritongen",
                                lambda d: d["spec"]["template"]["spec"]["containers"][0].update(imagee="x:1")),
    "probe without handler port": ("Deployment", "tritongen-frontend", lambda d: d["spec"]["template"]["spec"][
        "containers"][0]["readinessProbe"]["httpGet"].pop("port")),
    "service port as string": ("Service", "tritongen", lambda d: d["spec"]["ports"][0].update(port="8000")),
    "hpa without metric name": ("HorizontalPodAutoscaler", "tritongen",
                                lambda d: d["spec"]["metrics"][0]["pods"]["metric"].pop("name")),
    "pool without selector": ("InferencePool", "tritongen", lambda d: d["spec"].pop("selector")),
    "pool with empty matchLabels": ("InferencePool", "tritongen",
                                    lambda d: d["spec"]["selector"].update(matchLabels={})),
    "pool port as string": ("InferencePool", "tritongen", lambda d: d["spec"]["targetPorts"][0].update(number="9000")),
    "pool without target ports": ("InferencePool", "tritongen", lambda d: d["spec"].update(targetPorts=[])),
    "pool picker service without port": ("InferencePool", "tritongen",
                                         lambda d: d["spec"]["endpointPickerRef"].pop("port")),
    "pool with unknown field": ("InferencePool", "tritongen", lambda d: d["spec"].update(targetPortNumber=9000)),
    "route backend without name": ("HTTPRoute", "tritongen",
                                   lambda d: d["spec"]["rules"][0]["backendRefs"][0].pop("name")),
    "route with bad timeout": ("HTTPRoute", "tritongen",
                               lambda d: d["spec"]["rules"][0]["timeouts"].update(request="five minutes")),
    "pod monitor without selector": ("PodMonitor", "tritongen", lambda d: d["spec"].pop("selector")),
    "unknown custom resource": ("InferencePool", "tritongen", lambda d: d.update(kind="InferenceModel")),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_manifest_is_rejected(case):
    kind, name, edit = BROKEN[case]
    assert validate(named(kind, name))  # the original passes: what fails below is the edit
    with pytest.raises((jsonschema.ValidationError, SchemaNotFoundError)):
        validate(_broken(kind, name, edit))


def test_every_object_lives_in_the_declared_namespace():
    namespaces = [doc["metadata"]["name"] for doc in of_kind("Namespace")]
    assert len(namespaces) == 1
    outside = [f"{d['kind']}/{d['metadata']['name']}" for d in documents()
               if d["kind"] != "Namespace" and d["metadata"].get("namespace") != namespaces[0]]
    assert outside == []
    subjects = [s for rb in of_kind("RoleBinding") for s in rb["subjects"]]
    assert subjects and all(s.get("namespace") == namespaces[0] for s in subjects)


# --- the replicas' pod ------------------------------------------------------------------------------------------

def probe_url(probe: dict) -> str:
    """The URL an exec probe's `python3 -c` command opens."""
    command = probe["exec"]["command"]
    assert command[:2] == ["python3", "-c"], command
    return re.search(r"urlopen\('([^']+)'", command[2]).group(1)


def test_readiness_follows_the_generator_and_liveness_the_server():
    _, triton = triton_container()
    http = f"http://127.0.0.1:{triton_port('http')}"
    assert probe_url(triton["readinessProbe"]) == f"{http}/v2/models/generator/ready"
    assert probe_url(triton["livenessProbe"]) == f"{http}/v2/health/live"
    assert probe_url(triton["startupProbe"]) == f"{http}/v2/health/live"
    # Loading and the warm-up generation happen before Triton opens its endpoints: the startup probe must wait
    # for them, or the liveness probe restarts a pod that is still loading.
    startup = triton["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


class _Triton(http.server.BaseHTTPRequestHandler):
    ready = False

    def do_GET(self):  # noqa: N802 (the handler's name is the standard library's)
        ok = self.path == "/v2/health/live" or (self.path == "/v2/models/generator/ready" and _Triton.ready)
        self.send_response(200 if ok else 400)  # Triton answers a model that is not ready with 400
        self.end_headers()

    def log_message(self, *args):
        pass


def _run_probe(probe: dict, port: int) -> int:
    command = [c.replace(f":{TRITON_DEFAULT_PORTS['http']}/", f":{port}/") for c in probe["exec"]["command"]]
    return subprocess.run([sys.executable, *command[1:]], capture_output=True, timeout=30).returncode


def test_the_readiness_command_fails_until_the_generator_is_ready():
    _, triton = triton_container()
    server = http.server.HTTPServer(("127.0.0.1", 0), _Triton)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        _Triton.ready = False
        assert _run_probe(triton["readinessProbe"], port) != 0
        assert _run_probe(triton["livenessProbe"], port) == 0
        _Triton.ready = True
        assert _run_probe(triton["readinessProbe"], port) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert _run_probe(triton["livenessProbe"], port) != 0  # nothing listening: not live


def test_triton_listens_on_loopback_but_for_metrics_with_the_operator_key(tmp_path):
    """docker/entrypoint.sh run with the pod's environment and arguments, a fake tritonserver printing what it
    is given: HTTP and gRPC end on loopback, metrics on every interface, the control APIs keyed; and no process
    of its own beside Triton (a fake python3 records any), since the pod runs the OpenAI API in its own container."""
    _, triton = triton_container()
    key_env = env_of(triton)[OPERATOR_KEY_ENV]
    assert key_env["valueFrom"]["secretKeyRef"]["name"] and "value" not in key_env  # from a Secret, never inline
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"tritonserver": 'printf "%s\\n" "$@"', "python3": f'echo "$@" >> {tmp_path}/python3'}
    for program, script in fakes.items():
        (bin_dir / program).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / program).chmod(0o755)
    env = {name: e["value"] for name, e in env_of(triton).items() if "value" in e}
    env.update({"PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), OPERATOR_KEY_ENV: "k3y"})
    args = subprocess.run([str(ROOT / "docker" / "entrypoint.sh"), *triton["args"]], env=env, capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert not (tmp_path / "python3").exists(), (tmp_path / "python3").read_text()
    assert flag(args, "http-address") == flag(args, "grpc-address") == "127.0.0.1"
    assert flag(args, "metrics-address") == "0.0.0.0"
    assert flag(args, "model-repository") == env["MODEL_REPOSITORY"]  # the prepared repository, as it is
    guarded = "model-repository,shared-memory,trace,logging:tritongen-operator-key=k3y"
    assert flag(args, "http-restricted-api") == flag(args, "grpc-restricted-protocol") == guarded


def test_the_dynamo_worker_runs_beside_triton_in_its_pod():
    triton_spec, triton = triton_container()
    worker_spec, worker = running("tritongen.dynamo")
    assert worker_spec is triton_spec  # one pod: the worker reaches Triton on loopback
    args = worker.get("args", [])
    assert flag(args, "triton-url") == f"127.0.0.1:{triton_port('grpc')}"
    assert flag(args, "metrics-url") == f"http://127.0.0.1:{triton_port('metrics')}/metrics"
    # It reads the generator's config.pbtxt from the repository Triton serves (the same volume).
    repository = env_of(triton)["MODEL_REPOSITORY"]["value"]
    mounts = {c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (triton, worker)}
    assert flag(args, "model-repository") == repository
    assert mounts["dynamo-worker"][repository] == mounts["triton"][repository]
    # What Dynamo's Kubernetes discovery needs from the pod.
    env = env_of(worker)
    assert env["DYN_DISCOVERY_BACKEND"]["value"] == "kubernetes"
    assert {env[n]["valueFrom"]["fieldRef"]["fieldPath"] for n in ("POD_NAME", "POD_NAMESPACE", "POD_UID")} == {
        "metadata.name", "metadata.namespace", "metadata.uid"}


def test_dynamo_discovery_sees_the_replicas_and_may_record_them():
    worker_spec, _ = running("tritongen.dynamo")
    labels = named("Deployment", "tritongen")["spec"]["template"]["metadata"]["labels"]
    services = [s for s in of_kind("Service") if selects(s["spec"].get("selector", {}), labels)
                and s["metadata"]["labels"].get("nvidia.com/dynamo-discovery-enabled") == "true"
                and s["metadata"]["labels"].get("nvidia.com/dynamo-discovery-backend") == "kubernetes"]
    assert len(services) == 1
    bound = {s["name"]: rb["roleRef"]["name"] for rb in of_kind("RoleBinding") for s in rb["subjects"]}
    granted = {r["metadata"]["name"]: r["rules"] for r in of_kind("Role")}

    def may(account: str, verb: str, resource: str) -> bool:
        return any(resource in rule["resources"] and verb in rule["verbs"]
                   for rb in of_kind("RoleBinding") if account in [s["name"] for s in rb["subjects"]]
                   for rule in granted[rb["roleRef"]["name"]])

    worker_account = worker_spec["serviceAccountName"]
    frontend_account = running("dynamo.frontend")[0]["serviceAccountName"]
    assert worker_account in bound and frontend_account in bound
    for account in (worker_account, frontend_account):
        assert may(account, "watch", "endpointslices") and may(account, "watch", "dynamoworkermetadatas")
    assert may(worker_account, "create", "dynamoworkermetadatas")
    assert not may(frontend_account, "create", "dynamoworkermetadatas")  # only workers write records


# --- services, the autoscaler, the KV store, the pool -----------------------------------------------------------

def container_port(c: dict, port) -> int:
    """A Service's targetPort (a number or a port name) as a number in container `c`, or 0 if `c` lacks it."""
    if isinstance(port, int):
        return port
    return next((p["containerPort"] for p in c.get("ports", []) if p.get("name") == port), 0)


def test_no_service_reaches_tritons_http_or_grpc():
    """The control APIs are on Triton's HTTP and gRPC endpoints: no Service may lead there (and they listen on
    loopback only); the metrics port is all the pod offers of Triton."""
    _, triton = triton_container()
    control = {triton_port("http"), triton_port("grpc")}
    assert [p["containerPort"] for p in triton["ports"]] == [triton_port("metrics")]
    reached = []
    for service in of_kind("Service"):
        for template in pod_templates():
            if not selects(service["spec"].get("selector", {}), template["metadata"]["labels"]):
                continue
            for c in template["spec"]["containers"]:
                if c == triton:
                    ports = {container_port(c, p.get("targetPort", p["port"])) for p in service["spec"]["ports"]}
                    reached += [(service["metadata"]["name"], p) for p in ports & control]
    assert reached == []
    assert any(selects(s["spec"].get("selector", {}), named("Deployment", "tritongen")["spec"]["template"][
        "metadata"]["labels"]) for s in of_kind("Service"))  # the check above looked at the replicas' pods


def adapter_metric_names() -> dict[str, str]:
    """Custom metric name -> the Prometheus series it comes from, as prometheus-adapter's rules rename them."""
    names = {}
    for rule in yaml.safe_load(HELM_VALUES.read_text())["rules"]["custom"]:
        series = re.match(r"'?([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"]).group(1)
        go_template = re.sub(r"\$\{(\d+)\}", r"\\\1", rule["name"]["as"])  # Go's ${1} is Python's \1
        names[re.sub(rule["name"]["matches"], go_template, series)] = series
    return names


def test_the_autoscaler_follows_the_generators_waiting_requests():
    hpa = named("HorizontalPodAutoscaler", "tritongen")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "tritongen") and named("Deployment", target["name"])
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    name = metric["pods"]["metric"]["name"]
    series = adapter_metric_names()[name]  # the adapter serves it, from a series the generator exports
    assert series == "tritongen:num_requests_waiting"
    assert f'"{series}"' in (ROOT / "backend_src" / "tritongen" / "triton" / "metrics.py").read_text()
    assert "queue_duration" not in json.dumps(hpa)


def redis_args() -> dict[str, str]:
    args = container(pod_spec("tritongen-kv"), "redis")["args"]
    assert args[0] == "redis-server"
    return {args[i][2:]: args[i + 1] for i in range(1, len(args), 2)}


def test_redis_is_a_bounded_cache_that_the_replicas_find():
    args = redis_args()
    redis = container(pod_spec("tritongen-kv"), "redis")
    limit = size_bytes(redis["resources"]["limits"]["memory"])
    assert 0 < size_bytes(args["maxmemory"]) <= 0.8 * limit  # Redis' overhead fits above its bound
    assert args["maxmemory-policy"] == "allkeys-lru"
    assert args["save"] == "" and args["appendonly"] == "no"  # a cache: nothing on disk
    parameters = json.loads(named("ConfigMap", "tritongen-generator")["data"]["parameters.json"])
    assert parameters["kv_connector"] == "redis"
    host, port = re.fullmatch(r"redis://([^:/]+):(\d+)/\d+", parameters["kv_connector_redis_url"]).groups()
    service = named("Service", host)
    assert selects(service["spec"]["selector"], named("Deployment", "tritongen-kv")["spec"]["template"]["metadata"][
        "labels"])
    assert any(p["port"] == int(port) and container_port(redis, p["targetPort"]) == 6379
               for p in service["spec"]["ports"])


def test_the_inference_pool_is_the_replicas_openai_apis():
    pool = named("InferencePool", "tritongen")
    template = named("Deployment", "tritongen")["spec"]["template"]
    assert selects(pool["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    assert not selects(pool["spec"]["selector"]["matchLabels"],
                       named("Deployment", "tritongen-frontend")["spec"]["template"]["metadata"]["labels"])
    _, api = running("tritongen.openai_api")
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [int(flag(api["args"], "port"))]
    assert flag(api["args"], "host") == "0.0.0.0" and api in template["spec"]["containers"]
    backends = [b for r in named("HTTPRoute", "tritongen")["spec"]["rules"] for b in r["backendRefs"]]
    assert backends == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "tritongen"}]


# --- every pod --------------------------------------------------------------------------------------------------

def all_containers() -> list[tuple[dict, dict]]:
    return [(t["spec"], c) for t in pod_templates() for c in t["spec"]["containers"] + t["spec"].get(
        "initContainers", [])]


def test_every_image_is_pinned():
    images = [c["image"] for _, c in all_containers()]
    assert len(images) >= 6
    unpinned = [i for i in images if "@sha256:" not in i
                and (":" not in i.rsplit("/", 1)[-1] or i.rsplit(":", 1)[1] in ("latest", ""))]
    assert unpinned == []


def test_every_container_is_locked_down_and_sized():
    """The restricted Pod Security profile (which the namespace enforces), a read-only root filesystem and
    resource requests, for every container."""
    assert named("Namespace", "tritongen")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    problems = []
    for spec, c in all_containers():
        pod, own = spec.get("securityContext", {}), c.get("securityContext", {})
        setting = lambda key: own.get(key, pod.get(key))  # noqa: E731 (the container's, else the pod's)
        checks = {"non-root": setting("runAsNonRoot") is True and setting("runAsUser") != 0,
                  "no escalation": own.get("allowPrivilegeEscalation") is False,
                  "no capabilities": own.get("capabilities", {}).get("drop") == ["ALL"],
                  "seccomp": (setting("seccompProfile") or {}).get("type") == "RuntimeDefault",
                  "read-only root": own.get("readOnlyRootFilesystem") is True,
                  "not privileged": not own.get("privileged"),
                  "requests": {"cpu", "memory"} <= set(c.get("resources", {}).get("requests", {})),
                  "memory limit": "memory" in c.get("resources", {}).get("limits", {})}
        problems += [f"{c['name']}: {check}" for check, ok in checks.items() if not ok]
    assert problems == []
    volumes = [v for t in pod_templates() for v in t["spec"].get("volumes", [])]
    assert not [v for v in volumes if "hostPath" in v]


def test_only_the_triton_container_holds_a_gpu():
    holders = [c["name"] for _, c in all_containers() if "nvidia.com/gpu" in c["resources"].get("limits", {})]
    assert holders == [triton_container()[1]["name"]]


def test_the_openai_api_container_passes_flags_the_api_has():
    _, api = running("tritongen.openai_api")
    source = (ROOT / "backend_src" / "tritongen" / "openai_api" / "__main__.py").read_text()
    flags = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", source))
    given = {a.split("=", 1)[0] for a in api["args"]}
    assert given and given <= flags, given - flags


def test_the_dynamo_worker_container_parses_with_the_workers_own_parser(monkeypatch):
    worker_args = pytest.importorskip("tritongen.dynamo.worker_args", reason="no Dynamo worker in this checkout")
    _, worker = running("tritongen.dynamo")
    for name, e in env_of(worker).items():  # its defaults come from the container's environment, as in the pod
        if "value" in e:
            monkeypatch.setenv(name, e["value"])
    args = worker_args.parser().parse_args(worker["args"])
    assert str(args.model_repository) == env_of(triton_container()[1])["MODEL_REPOSITORY"]["value"]
    assert (args.discovery_backend, args.request_plane, args.event_plane) == ("kubernetes", "tcp", "zmq")
    assert args.model_path is None  # the generator's own folder, which the tritongen-dynamo image also holds


# --- the generator's settings -----------------------------------------------------------------------------------

def _prepare(tmp_path: Path, model: Path, parameters: dict) -> subprocess.CompletedProcess:
    data = named("ConfigMap", "tritongen-generator")["data"]
    (tmp_path / "prepare_repository.py").write_text(data["prepare_repository.py"])
    (tmp_path / "parameters.json").write_text(json.dumps(parameters))
    heads = {"DRAFT_MODEL", "MTP_HEAD", "EAGLE3_HEAD", "SHARED_KV_HEAD"}  # none here: the tiny model has no heads
    env = {**{k: v for k, v in os.environ.items() if k not in heads}, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(tmp_path / "prepare_repository.py"), str(model),
                           str(tmp_path / "parameters.json"), str(tmp_path / "repository")],
                          capture_output=True, text=True, timeout=120, env=env)


def _generator_knows(key: str, value: str, tmp_path: Path) -> bool:
    from tritongen.triton.generator_settings import parse_settings

    try:
        parse_settings({key: value}, tmp_path)
    except ValueError as exc:
        return "unknown parameter" not in str(exc)
    return True


def test_the_init_container_writes_the_generator_the_configmap_describes(tiny_folder, tmp_path):
    parameters = json.loads(named("ConfigMap", "tritongen-generator")["data"]["parameters.json"])
    unknown = [k for k, v in parameters.items() if not _generator_knows(k, v, tmp_path)]
    if unknown:
        pytest.skip(f"the generator does not know {unknown} in this checkout yet")
    prepared = _prepare(tmp_path, tiny_folder, parameters)
    assert prepared.returncode == 0, prepared.stderr
    generator = tmp_path / "repository" / "generator"
    config = text_format.Parse((generator / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.parameters["target_model"].string_value == str(tiny_folder)  # served in place
    assert {k: config.parameters[k].string_value for k in parameters} == parameters
    assert (generator / "1" / "model.py").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tritongen-repository-")] == []  # cleaned up


def test_the_init_container_refuses_a_parameter_the_generator_does_not_know(tiny_folder, tmp_path):
    prepared = _prepare(tmp_path, tiny_folder, {"max_num_seqz": "8"})
    assert prepared.returncode != 0 and "max_num_seqz" in prepared.stderr
    assert not (tmp_path / "repository").exists()  # Triton never sees a half-configured generator
