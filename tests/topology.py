"""A deployment file's processes run on this machine: each host name of the
file and port becomes a free loopback port, each container path a folder,
so that a test runs the file's own command lines (compose, Kubernetes)."""

import os
import re
import subprocess

from conftest import FLOE, free_port

IMAGE_DATA = "/var/lib/floe"


def image_env():
    """The ENV of the runtime image (deploy/container/Containerfile.prebuilt)."""
    from conftest import ROOT
    text = (ROOT / "deploy" / "container" / "Containerfile.prebuilt").read_text()
    block = re.search(r"^ENV (.*?)(?=^\S)", text, re.S | re.M).group(1)
    return dict(pair.split("=", 1) for pair in block.replace("\\\n", " ").split())


class Processes:
    """Processes named as the file's hosts, addressed on loopback ports."""

    def __init__(self, tmp, hosts):
        self.tmp = tmp
        self.hosts = set(hosts)
        self.ports = {}
        self.procs = []
        # Other replacements, applied first (an endpoint, a mount).
        self.replace = {}

    def port(self, host, port):
        return self.ports.setdefault((host, int(port)), free_port())

    def rewrite(self, text, own):
        """`host:port` of a known host, and `own`'s `0.0.0.0:port`, as
        loopback addresses; `localhost` is the file's machine, for
        `published` ports."""
        for old, new in self.replace.items():
            text = text.replace(old, new)
        text = text.replace(IMAGE_DATA, str(self.tmp / own))

        def address(m):
            host, port = m.group(1), m.group(2)
            if host == "0.0.0.0":
                return f"127.0.0.1:{self.port(own, port)}"
            if host in self.hosts:
                return f"127.0.0.1:{self.port(host, port)}"
            return m.group(0)
        return re.sub(r"(?<![\w.-])(0\.0\.0\.0|[a-z][a-z0-9.-]*[a-z0-9]):(\d+)", address, text)

    def start_floe(self, name, args, env):
        """`floe ARGS` as host `name`, over the image's ENV and `env`."""
        merged = {**os.environ, "FLOE_LOG": "info"}
        for key, value in {**image_env(), **env}.items():
            merged[key] = self.rewrite(str(value), name)
        (self.tmp / name).mkdir(exist_ok=True)
        args = [self.rewrite(a, name) for a in args]
        log = open(self.tmp / f"{name}.log", "w")
        proc = subprocess.Popen([FLOE, *args], env=merged, cwd=self.tmp / name, stdout=log,
                                stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        return proc

    def log(self, name):
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def check_alive(self):
        for name, proc in self.procs:
            assert proc.poll() is None, f"{name} exited:\n{self.log(name)[-3000:]}"

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def ready(admin):
    """Whether an agent's admin port at `admin` answers /readyz with 200."""
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{admin}/readyz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False
