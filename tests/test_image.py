"""The container image (deploy/container): built from the floe binary under
test with buildah, its filesystem exported and run with chroot as the
image's user (no container runtime works in CI's sandbox), then produced to
and consumed from with kcat."""

import json
import os
import pathlib
import subprocess
import time

import pytest

from clients import create_topic, kcat, kcat_consume
from conftest import FLOE, ROOT, free_port

CONTAINER = ROOT / "deploy" / "container"


def runtime_stage(path):
    """The lines of a Containerfile's last stage, comments and COPY sources
    aside (a COPY keeps its options and destination)."""
    lines = pathlib.Path(path).read_text().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    stage = [line for line in lines[start:] if line and not line.startswith("#")]

    def copy(line):
        words = [w for w in line.split() if not w.startswith("--from=")]
        return " ".join(words[:-2] + [words[-1].rstrip("/")])
    return [copy(line) if line.startswith("COPY ") else line for line in stage]


def test_the_prebuilt_image_is_the_multi_stage_one():
    """Users build Containerfile (it compiles floe); tests build
    Containerfile.prebuilt from the binary under test: their runtime stages
    must not drift apart."""
    assert runtime_stage(CONTAINER / "Containerfile") == runtime_stage(CONTAINER / "Containerfile.prebuilt")


def as_root(args):
    return args if os.geteuid() == 0 else ["sudo", "-n", *args]


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    """The image built from the binary under test, exported to a folder."""
    tag = f"localhost/floe-test:{os.getpid()}"
    built = subprocess.run(as_root([str(CONTAINER / "build.sh"), FLOE, tag]),
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    inspected = subprocess.run(as_root(["podman", "image", "inspect", tag]),
                               capture_output=True, text=True, timeout=60, check=True)
    config = json.loads(inspected.stdout)[0]["Config"]
    root = tmp_path_factory.mktemp("image")
    root.chmod(0o755)  # the image's `/`, which its user must enter
    created = subprocess.run(as_root(["podman", "create", tag]), capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip()
    exported = subprocess.Popen(as_root(["podman", "export", created]), stdout=subprocess.PIPE)
    subprocess.run(as_root(["tar", "-x", "-C", str(root)]), stdin=exported.stdout, check=True,
                   timeout=300)
    assert exported.wait(timeout=60) == 0
    subprocess.run(as_root(["podman", "rm", created]), capture_output=True, timeout=60)
    subprocess.run(as_root(["podman", "rmi", tag]), capture_output=True, timeout=60)
    yield root, config
    subprocess.run(as_root(["rm", "-rf", str(root)]), timeout=120)


def test_the_image_runs_as_its_own_user_with_nothing_but_floe(image_root):
    root, config = image_root
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/usr/local/bin/floe"] and config["Cmd"] == ["agent"]
    assert set(config["ExposedPorts"]) == {"9092/tcp", "9093/tcp", "9644/tcp"}
    # No shell, no package manager: the binary, its libraries, certificates.
    assert not (root / "bin").exists() and not (root / "usr" / "bin").exists()
    assert (root / "etc" / "ssl" / "certs" / "ca-certificates.crt").exists()
    data = root / "var" / "lib" / "floe"
    assert (data.stat().st_uid, data.stat().st_gid) == (65532, 65532)


def test_an_agent_from_the_image_serves_clients(image_root, tmp_path):
    """The image's own settings (its ENV: every interface, data in
    /var/lib/floe), run as its user: refused without an address to
    advertise, then serving kcat once given one."""
    root, config = image_root
    env = dict(item.split("=", 1) for item in config["Env"])
    port, admin = free_port(), free_port()
    env |= {"FLOE_LISTEN": f"0.0.0.0:{port}", "FLOE_ADMIN_LISTEN": f"127.0.0.1:{admin}"}
    run = as_root(["chroot", "--userspec=65532:65532", str(root), *config["Entrypoint"], *config["Cmd"]])

    refused = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "advertise" in refused.stderr, refused.stderr

    log = open(tmp_path / "agent.log", "w")
    agent = subprocess.Popen(run, env=env | {"FLOE_ADVERTISE": f"127.0.0.1:{port}"},
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        bootstrap = f"127.0.0.1:{port}"
        deadline = time.time() + 30
        while time.time() < deadline and "floe agent ready" not in (tmp_path / "agent.log").read_text():
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            time.sleep(0.1)
        create_topic(bootstrap, "from-image", 2)
        kcat("-P", "-b", bootstrap, "-t", "from-image", "-p", "0", input="a\nb\nc\n")
        assert [v for _, _, v in kcat_consume(bootstrap, "from-image")] == ["a", "b", "c"]
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    # Its data went where the image keeps it, written as its user.
    written = root / "var" / "lib" / "floe"
    assert any(p.stat().st_uid == 65532 for p in written.rglob("*")), list(written.rglob("*"))
