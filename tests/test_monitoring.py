"""The monitoring kit (deploy/monitoring): the alert rules pass promtool's
checks and their unit tests (each alert fires on the series it is meant
for, with its text), the Prometheus configuration is valid, and every
metric the rules and the Grafana dashboard query is one an agent serves."""

import json
import re
import shutil
import subprocess

from clients import kcat, kcat_consume
from conftest import ROOT

MONITORING = ROOT / "deploy" / "monitoring"


def promtool():
    found = shutil.which("promtool")
    assert found, "promtool is not installed (scripts/test.sh installs Debian's prometheus)"
    return found


def test_the_alert_rules_check_and_fire_as_meant():
    tool = promtool()
    for args in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"],
                 ["check", "config", "--syntax-only", "prometheus.yaml"]):
        done = subprocess.run([tool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"


def queried_metrics():
    """Every metric name the alert rules and the dashboard query."""
    exprs = re.findall(r"expr: (\|?.*(?:\n {10,}.*)*)", (MONITORING / "alerts.yaml").read_text())
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = set()
    for expr in exprs:
        expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)
        names |= {w for w in re.findall(r"[a-z_][a-z0-9_]*", expr) if w.startswith("floe_")}
    return names


def test_every_metric_queried_is_served(make_agent, metastore):
    import time

    from confluent_kafka import Consumer, TopicPartition

    agent = make_agent("--metastore", metastore.address, "--group-lag-interval", "200ms")
    kcat("-P", "-b", agent.bootstrap, "-t", "watched", input="a\nb\n")
    assert len(kcat_consume(agent.bootstrap, "watched")) == 2
    # A group with a committed offset, for its lag (families without a
    # sample are not shown).
    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "watchers"})
    consumer.commit(offsets=[TopicPartition("watched", 0, 1)], asynchronous=False)
    consumer.close()
    deadline = time.time() + 15
    text = ""
    while time.time() < deadline and "floe_group_lag{" not in text:
        _, text = agent.admin("/metrics")
        time.sleep(0.2)
    served = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
        served |= {name + s for s in suffixes}
    missing = sorted(queried_metrics() - served)
    assert not missing, missing
    assert len(queried_metrics()) > 15
