"""The Kubernetes manifests (deploy/kubernetes): valid for the API server
(kubernetes-validate, strict), and run as written: the metastore
StatefulSet's three pods and an agent pod of the Deployment, each with its
args, env (the downward API's fields as Kubernetes fills them) and secrets,
as local processes; pod DNS names become loopback ports. Then a client
produces and consumes through the agent."""

import re
import time

import kubernetes_validate
import yaml

from clients import create_topic, kcat, kcat_consume
from conftest import ROOT, S3_KEYS
from topology import Processes, ready

MANIFESTS = ROOT / "deploy" / "kubernetes" / "floe.yaml"
KUBERNETES = "1.31.0"


def resources():
    return [doc for doc in yaml.safe_load_all(MANIFESTS.read_text()) if doc]


def test_the_manifests_are_valid_kubernetes():
    for doc in resources():
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def pod_env(container, pod, secrets):
    """The container's env as Kubernetes gives it to `pod`."""
    env = {}
    for source in container.get("envFrom", []):
        env |= secrets[source["secretRef"]["name"]]
    for var in container.get("env", []):
        if "value" in var:
            value = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            value = pod[path]
        # $(VAR) refers to variables defined before it, as Kubernetes expands them.
        env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)
    return env


def test_the_manifests_run_as_written(tmp_path, s3_endpoint):
    docs = {(d["kind"], d["metadata"]["name"]): d for d in resources()}
    metastore = docs[("StatefulSet", "floe-metastore")]
    agents = docs[("Deployment", "floe-agent")]
    service = metastore["spec"]["serviceName"]
    replicas = metastore["spec"]["replicas"]
    pods = [f"floe-metastore-{n}" for n in range(replicas)]
    hosts = [f"{pod}.{service}" for pod in pods] + ["agent-pod"]
    p = Processes(tmp_path, hosts)

    secret_dir = tmp_path / "metastore-secret"
    secret_dir.mkdir()
    (secret_dir / "secret").write_text("0123456789abcdef0123456789abcdef")
    # The secrets the README creates, and the mounts they land on.
    secrets = {"floe-object-store": dict(S3_KEYS)}
    p.replace["/etc/floe/metastore"] = str(secret_dir)
    p.replace["s3://my-floe-bucket/cluster-1?region=us-east-1"] = (
        f"s3://floe-test/k8s-{time.time_ns()}?endpoint={s3_endpoint}&region=us-east-1&path_style=true")

    container = metastore["spec"]["template"]["spec"]["containers"][0]
    try:
        for n, pod in enumerate(pods):
            fields = {"metadata.name": pod,
                      "metadata.labels['apps.kubernetes.io/pod-index']": str(n)}
            env = pod_env(container, fields, secrets)
            args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
            p.start_floe(f"{pod}.{service}", args, env)

        container = agents["spec"]["template"]["spec"]["containers"][0]
        env = pod_env(container, {"status.podIP": "agent-pod"}, secrets)
        args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
        p.start_floe("agent-pod", args, env)
        probe = container["readinessProbe"]["httpGet"]
        assert probe["path"] == "/readyz" and container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        admin = f"127.0.0.1:{p.port('agent-pod', 9644)}"
        deadline = time.time() + 60
        while time.time() < deadline and not ready(admin):
            p.check_alive()
            time.sleep(0.2)
        assert ready(admin), p.log("agent-pod")[-3000:]

        bootstrap = f"127.0.0.1:{p.port('agent-pod', 9092)}"
        create_topic(bootstrap, "on-kubernetes", 2)
        kcat("-P", "-b", bootstrap, "-t", "on-kubernetes", "-p", "1", input="x\ny\n")
        assert [v for _, _, v in kcat_consume(bootstrap, "on-kubernetes")] == ["x", "y"]
        # The group formed from the pods' ordinals, as their ids.
        assert "ready id=0" in p.log(f"{pods[0]}.{service}"), p.log(f"{pods[0]}.{service}")
    finally:
        p.stop()
