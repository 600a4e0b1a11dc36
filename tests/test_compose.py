"""The local cluster of deploy/compose, run as written: each floe service's
command line and environment from compose.yaml (over the image's own ENV
from the Containerfile), and HAProxy with the compose file's haproxy.cfg,
as local processes. Host names and ports become free loopback ports, MinIO
becomes the local S3 server; nothing else changes, so the files cannot
drift from floe's flags. Clients go through the balancer, and an agent
killed with -9 loses nothing."""

import re
import shutil
import subprocess
import time

import boto3
import pytest
import yaml

from clients import create_topic, kcat, kcat_consume
from conftest import ROOT, S3_KEYS
from topology import Processes, ready

COMPOSE = ROOT / "deploy" / "compose"


class Topology(Processes):
    """compose.yaml's services on this machine."""

    def __init__(self, tmp_path, s3_endpoint):
        self.spec = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
        self.services = self.spec["services"]
        super().__init__(tmp_path, self.services)
        self.s3 = s3_endpoint
        self.replace["http://minio:9000"] = s3_endpoint
        # The balancer's published ports, as the machine's `localhost`.
        for published in self.services["lb"]["ports"]:
            outside, inside = published.split(":")
            self.replace[f"localhost:{outside}"] = f"lb:{inside}"

    def floe_services(self, command):
        return [n for n, s in self.services.items()
                if s.get("image", "").startswith("floe") and s["command"][0] == command]

    def start_service(self, name):
        service = self.services[name]
        return self.start_floe(name, service["command"], service.get("environment", {}))

    def start_balancer(self):
        config = (COMPOSE / "haproxy.cfg").read_text()
        config = re.sub(r"^(\s*server \S+ )(\S+):(\d+) port (\d+)",
                        lambda m: f"{m.group(1)}127.0.0.1:{self.port(m.group(2), m.group(3))} "
                                  f"port {self.port(m.group(2), m.group(4))}",
                        config, flags=re.M)
        config = re.sub(r"^(\s*bind ):(\d+)", lambda m: f"{m.group(1)}127.0.0.1:{self.port('lb', m.group(2))}",
                        config, flags=re.M)
        (self.tmp / "haproxy.cfg").write_text(config)
        haproxy = shutil.which("haproxy")
        assert haproxy, "haproxy is not installed (scripts/test.sh installs it)"
        proc = subprocess.Popen([haproxy, "-f", str(self.tmp / "haproxy.cfg"), "-db"],
                                stdout=open(self.tmp / "lb.log", "w"), stderr=subprocess.STDOUT)
        self.procs.append(("lb", proc))
        return f"127.0.0.1:{self.port('lb', 9092)}"


@pytest.fixture
def topology(tmp_path, s3_endpoint):
    t = Topology(tmp_path, s3_endpoint)
    yield t
    t.stop()


def test_the_compose_cluster_runs_as_written(topology):
    t = topology
    # The `bucket` service's job: MinIO's bucket, on the local server.
    bucket = re.search(r"mc mb \S+ local/(\S+)", " ".join(t.services["bucket"]["command"])).group(1)
    s3 = boto3.client("s3", endpoint_url=t.s3, region_name="us-east-1", **{
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"]})
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)

    metas, agents = t.floe_services("metastore"), t.floe_services("agent")
    assert len(metas) == 3 and len(agents) == 3, (metas, agents)
    for name in metas + agents:
        t.start_service(name)
    admins = {name: f"127.0.0.1:{t.port(name, 9644)}" for name in agents}
    deadline = time.time() + 60
    while time.time() < deadline and not all(ready(a) for a in admins.values()):
        t.check_alive()
        time.sleep(0.2)
    assert all(ready(a) for a in admins.values()), {n: t.log(n)[-2000:] for n in agents}

    bootstrap = t.start_balancer()
    deadline = time.time() + 30
    while time.time() < deadline:
        listed = subprocess.run(["kcat", "-b", bootstrap, "-L", "-m", "2"], capture_output=True, text=True)
        if listed.returncode == 0 and "1 brokers" in listed.stdout:
            break
        time.sleep(0.5)
    assert bootstrap.split(":")[1] in listed.stdout, listed.stdout + listed.stderr

    create_topic(bootstrap, "compose", 3)
    first = [f"v{i}" for i in range(1000)]
    kcat("-P", "-b", bootstrap, "-t", "compose", "-X", "enable.idempotence=true",
         input="\n".join(first) + "\n")
    # kill -9 of an agent: the balancer's check takes it out; nothing is lost.
    victim = dict(t.procs)[agents[0]]
    victim.kill()
    victim.wait()
    second = [f"w{i}" for i in range(1000)]
    kcat("-P", "-b", bootstrap, "-t", "compose", "-X", "enable.idempotence=true",
         "-X", "message.timeout.ms=60000", input="\n".join(second) + "\n")
    values = sorted(v for _, _, v in kcat_consume(bootstrap, "compose"))
    assert values == sorted(first + second)
