"""The systemd units (deploy/systemd): accepted by `systemd-analyze verify`,
and run as written: each unit's ExecStart with its EnvironmentFile (the
example files, one per metastore node of the group they name), as local
processes; host names become loopback ports. Then a client produces and
consumes through the agent."""

import shutil
import subprocess
import time

from clients import create_topic, kcat, kcat_consume
from conftest import FLOE, ROOT, S3_KEYS
from topology import Processes, ready

UNITS = ROOT / "deploy" / "systemd"


def unit_value(unit, key):
    return [line.split("=", 1)[1] for line in (UNITS / unit).read_text().splitlines()
            if line.startswith(f"{key}=")][0]


def env_file(name):
    return dict(line.split("=", 1) for line in (UNITS / name).read_text().splitlines()
                if line and not line.startswith("#"))


def test_the_units_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is not installed (scripts/test.sh installs it)"
    for unit in ("floe-agent.service", "floe-metastore.service"):
        text = (UNITS / unit).read_text().replace("/usr/local/bin/floe", FLOE)
        (tmp_path / unit).write_text(text)
    verified = subprocess.run([analyze, "verify", "--man=no", *(str(p) for p in tmp_path.iterdir())],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def test_the_units_run_as_written(tmp_path, s3_endpoint):
    node = env_file("metastore.env")
    peers = dict(p.split("=", 1) for p in node["FLOE_METASTORE_PEERS"].split(","))
    hosts = [address.rsplit(":", 1)[0] for address in peers.values()]
    agent_env = env_file("agent.env")
    hosts.append(agent_env["FLOE_ADVERTISE"].rsplit(":", 1)[0])
    p = Processes(tmp_path, hosts)
    secret = tmp_path / "metastore.secret"
    secret.write_text("0123456789abcdef0123456789abcdef")
    p.replace[node["FLOE_METASTORE_SECRET_FILE"]] = str(secret)
    p.replace[agent_env["FLOE_OBJECT_STORE"]] = (
        f"s3://floe-test/vms-{time.time_ns()}?endpoint={s3_endpoint}&region=us-east-1&path_style=true")

    command = unit_value("floe-metastore.service", "ExecStart").split()
    assert command[0] == "/usr/local/bin/floe"
    try:
        for node_id, address in peers.items():
            host = address.rsplit(":", 1)[0]
            # Each node's file: its own id and address, as the example's comments say.
            env = node | {"FLOE_METASTORE_ID": node_id, "FLOE_METASTORE_ADVERTISE": address}
            p.start_floe(host, command[1:], env)
        command = unit_value("floe-agent.service", "ExecStart").split()
        agent = agent_env["FLOE_ADVERTISE"].rsplit(":", 1)[0]
        p.start_floe(agent, command[1:], agent_env | S3_KEYS)
        admin = p.rewrite(agent_env["FLOE_ADMIN_LISTEN"], agent)
        deadline = time.time() + 60
        while time.time() < deadline and not ready(admin):
            p.check_alive()
            time.sleep(0.2)
        assert ready(admin), p.log(agent)[-3000:]
        bootstrap = p.rewrite(agent_env["FLOE_ADVERTISE"], agent)
        create_topic(bootstrap, "on-vms", 1)
        kcat("-P", "-b", bootstrap, "-t", "on-vms", input="1\n2\n")
        assert [v for _, _, v in kcat_consume(bootstrap, "on-vms")] == ["1", "2"]
    finally:
        p.stop()
