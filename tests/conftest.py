"""Shared fixtures: a real `floe agent` process on a free loopback port."""

import os
import pathlib
import signal
import socket
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FLOE = os.environ.get("FLOE_BIN", str(ROOT / "target" / "debug" / "floe"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    """One `floe agent` with its own data folder; can be killed and restarted."""

    def __init__(self, workdir, *extra_args, env=None):
        self.workdir = pathlib.Path(workdir)
        # env entries set to None are removed from the agent's environment.
        merged = {**os.environ, **(env or {})}
        self.env = {k: v for k, v in merged.items() if v is not None}
        self.port = free_port()
        self.admin_port = free_port()
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_path = self.workdir / "agent.log"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        args = [
            FLOE, "agent",
            "--listen", self.bootstrap,
            "--admin-listen", f"127.0.0.1:{self.admin_port}",
            "--data-dir", str(self.workdir / "data"),
            "--object-store", f"file://{self.workdir / 'objects'}",
            *self.extra_args,  # later flags win
        ]
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                     env=self.env)
        # An agent without the kafka role serves only its admin port.
        roles = [a for i, a in enumerate(self.extra_args) if i and self.extra_args[i - 1] == "--roles"]
        ready_port = self.admin_port if roles and "kafka" not in roles[-1] else self.port
        # Long enough for a start on a store slowed on purpose (a few calls
        # at --inject-faults latency).
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", ready_port), timeout=0.2).close()
            except OSError:
                time.sleep(0.05)
                continue
            # Listening; it serves once its admin port stops answering
            # "starting" (it binds its ports before it has joined its cluster).
            try:
                if self.admin("/healthz") == (200, "ok\n"):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"agent did not serve within 60s:\n{self.log()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def kill(self):
        """kill -9: no shutdown path runs."""
        self.stop(signal.SIGKILL)

    def restart(self):
        self.kill()
        return self.start()

    def admin(self, path):
        """(status, body) of a GET on the agent's admin port."""
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class MetaNode:
    """One `floe metastore` process (a Raft node with its own redb file, or a
    node on PostgreSQL when `args` has `--store`)."""

    def __init__(self, workdir, node_id, port, *args):
        self.id, self.port = node_id, port
        self.address = f"127.0.0.1:{port}"
        self.workdir = workdir
        self.args = [FLOE, "metastore", "--id", str(node_id), "--listen", self.address,
                     "--path", str(workdir / f"node{node_id}" / "meta.redb"),
                     "--snapshot-every", "300", *args]
        self.log_path = workdir / f"node{node_id}.log"
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test froze it
            self.proc.terminate()
            self.proc.wait(timeout=30)



@pytest.fixture
def metastore(tmp_path):
    """A single-node `floe metastore` that agents share (`--metastore metastore.address`)."""
    node = MetaNode(tmp_path, 1, free_port()).start()
    yield node
    node.stop()


@pytest.fixture
def peer_agents(tmp_path, metastore):
    """Agents sharing `metastore` and one object-store folder, each telling
    clients only of itself: `peer_agents(2, "--flush-interval", "20ms")`."""
    started = []

    def make(count, *extra, env=None):
        agents = []
        for _ in range(count):
            workdir = tmp_path / f"agent{len(started)}"
            workdir.mkdir()
            agent = Agent(workdir, "--metastore", metastore.address,
                          "--object-store", f"file://{tmp_path / 'objects'}",
                          "--discovery", "load-balancer", *extra, env=env)
            agent.extra_args += ["--advertise", agent.bootstrap]
            started.append(agent)
            agents.append(agent.start())
        return agents

    yield make
    for a in started:
        a.stop()


# Which server `s3_endpoint` starts (localstack/start.sh --server): moto in
# CI; FLOE_TEST_S3_SERVER=rustfs (or minio, localstack) runs the S3 tests
# against another, by hand. Its keys, as start.sh prints them.
S3_SERVER = os.environ.get("FLOE_TEST_S3_SERVER", "moto")
S3_KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """A local S3-compatible server (localstack/start.sh) with bucket `floe-test`."""
    import re
    state = tmp_path_factory.mktemp("s3")
    port = free_port()
    started = subprocess.run(
        [str(ROOT / "localstack" / "start.sh"), "--server", S3_SERVER, str(port), "floe-test",
         str(state)],
        capture_output=True, text=True, timeout=120,
    )
    assert started.returncode == 0, started.stderr
    keys = re.search(r"AWS_ACCESS_KEY_ID=(\S+) AWS_SECRET_ACCESS_KEY=(\S+)", started.stderr)
    if keys:
        S3_KEYS.update(AWS_ACCESS_KEY_ID=keys.group(1), AWS_SECRET_ACCESS_KEY=keys.group(2))
    yield started.stdout.strip()
    subprocess.run([str(ROOT / "localstack" / "stop.sh"), str(state)], check=False)


@pytest.fixture
def agent(tmp_path):
    a = Agent(tmp_path).start()
    yield a
    a.stop()


@pytest.fixture
def make_agent(tmp_path):
    """An agent with extra flags: make_agent("--max-frame-bytes", "1MiB")."""
    started = []

    def make(*extra, env=None):
        a = Agent(tmp_path, *extra, env=env).start()
        started.append(a)
        return a

    yield make
    for a in started:
        a.stop()


class Postgres:
    """A throwaway PostgreSQL server (scripts/postgres.sh), which a test may
    stop and start again."""

    def __init__(self):
        import tempfile
        # Directly in /tmp: the server runs as `postgres`, which must reach it.
        self.dir = tempfile.mkdtemp(prefix="floe-pg-")
        self.port = free_port()
        self.url = None

    def start(self):
        done = subprocess.run([str(ROOT / "scripts" / "postgres.sh"), "start", self.dir, str(self.port)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        self.url = done.stdout.strip()
        return self

    def stop(self):
        subprocess.run([str(ROOT / "scripts" / "postgres.sh"), "stop", self.dir],
                       capture_output=True, text=True, timeout=120)

    def database(self, name):
        """The URL of a new, empty database `name`."""
        subprocess.run(["psql", self.url, "-q", "-c", f"CREATE DATABASE {name}"],
                       check=True, capture_output=True, timeout=60)
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def sql(self, database_url, statement):
        """The rows `statement` answers in `database_url`, as lists of strings."""
        done = subprocess.run(["psql", database_url, "-At", "-F", "\t", "-c", statement],
                              check=True, capture_output=True, text=True, timeout=60)
        return [line.split("\t") for line in done.stdout.splitlines()]


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the session's tests; each takes a database."""
    server = Postgres().start()
    yield server
    server.stop()


@pytest.fixture
def postgres(postgres_server, request):
    """The URL of a database of this test's own in the session's server."""
    import re
    name = "t_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:50]
    return postgres_server.database(name)
