"""The agent on an S3-compatible server (moto, via localstack/): every codec
round-trips, survives kill -9 with a cold cache (ranged GETs), and compaction
and GC work on the bucket."""

import time

import boto3

from check import check_partitions
from clients import CODECS, create_topic, kcat, kcat_consume
from conftest import S3_KEYS

RECORDS = 20_000


def bucket_keys(endpoint, prefix):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"])
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="floe-test", Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_s3_round_trip_restart_and_compaction(make_agent, s3_endpoint, tmp_path):
    url = f"s3://floe-test/run-{time.time_ns()}?endpoint={s3_endpoint}&region=us-east-1&path_style=true"
    prefix = url.split("/")[3].split("?")[0] + "/"
    # Keys from a shared-credentials profile, as the AWS tools keep them.
    credentials = tmp_path / "aws-credentials"
    credentials.write_text("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n"
                           f"[floe-ci]\naws_access_key_id = {S3_KEYS['AWS_ACCESS_KEY_ID']}\n"
                           f"aws_secret_access_key = {S3_KEYS['AWS_SECRET_ACCESS_KEY']}\n")
    profile = {"AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_PROFILE": "floe-ci",
               "AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}
    agent = make_agent("--object-store", url, "--compaction-interval", "0s", env=profile)
    produced = {}
    for codec in CODECS:
        topic = f"s3-{codec}"
        create_topic(agent.bootstrap, topic, 3)
        values = [f"{codec}-{i}" for i in range(RECORDS)]
        for half in (values[: RECORDS // 2], values[RECORDS // 2:]):  # two ingest files
            kcat("-P", "-b", agent.bootstrap, "-t", topic, "-K", ":", "-z", codec,
                 input="".join(f"k{int(v.split('-')[1]) % 11}:{v}\n" for v in half))
        produced[topic] = values
    before = {t: sorted(kcat_consume(agent.bootstrap, t)) for t in produced}
    for topic, values in produced.items():
        check_partitions(before[topic], values)
    ingest = [k for k in bucket_keys(s3_endpoint, prefix) if k.startswith(prefix + "ingest/")]
    assert len(ingest) >= 10

    # Cold cache: every read is a ranged GET against the S3 server.
    agent.restart()
    for topic in produced:
        assert sorted(kcat_consume(agent.bootstrap, topic)) == before[topic]

    # Compaction and GC against the bucket.
    agent.extra_args += ["--compaction-interval", "1s", "--compaction-min-extents", "2",
                         "--gc-grace", "0s"]
    agent.restart()
    deadline = time.time() + 60
    while time.time() < deadline and any(
            k.startswith(prefix + "ingest/") for k in bucket_keys(s3_endpoint, prefix)):
        time.sleep(0.5)
    keys = bucket_keys(s3_endpoint, prefix)
    assert not [k for k in keys if k.startswith(prefix + "ingest/")], "ingest objects left"
    assert [k for k in keys if k.startswith(prefix + "merged/")]
    for topic in produced:
        assert sorted(kcat_consume(agent.bootstrap, topic)) == before[topic]


def test_an_unusable_store_is_named_at_start_in_one_line(s3_endpoint, tmp_path):
    """A missing bucket or an endpoint that does not answer: the agent says
    so in one line and exits non-zero, rather than serving and retrying
    every upload behind the scenes."""
    import subprocess

    from conftest import FLOE, free_port

    def start(url):
        return subprocess.run(
            [FLOE, "agent", "--listen", f"127.0.0.1:{free_port()}",
             "--admin-listen", f"127.0.0.1:{free_port()}",
             "--data-dir", str(tmp_path / f"data-{time.time_ns()}"), "--object-store", url],
            capture_output=True, text=True, timeout=90,
            env={**__import__("os").environ, **S3_KEYS, "FLOE_LOG": "error"})

    missing = start(f"s3://no-such-bucket/x?endpoint={s3_endpoint}&region=us-east-1&path_style=true")
    assert missing.returncode != 0
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such bucket" in lines[0], missing.stderr
    assert "s3://no-such-bucket/x " in lines[0] and "endpoint=" not in lines[0], lines[0]

    started = time.time()
    unreachable = start(f"s3://floe-test/x?endpoint=http://127.0.0.1:{free_port()}"
                        "&region=us-east-1&path_style=true&retry_timeout=2s&connect_timeout=1s")
    assert unreachable.returncode != 0
    lines = unreachable.stderr.strip().splitlines()
    assert len(lines) == 1 and "floe-test" in lines[0], unreachable.stderr
    assert time.time() - started < 60


def test_check_store_tries_every_call_floe_makes(s3_endpoint, tmp_path):
    """`floe check-store` against the S3 server and a local folder: each
    call floe makes, one line each, and an exit status that says whether
    floe can use the store."""
    import os
    import subprocess

    from conftest import FLOE, free_port

    keys = {**os.environ, **S3_KEYS, "FLOE_LOG": "error"}

    def check(url):
        return subprocess.run([FLOE, "check-store", url], capture_output=True, text=True,
                              timeout=120, env=keys)

    s3 = check(f"s3://floe-test/check?endpoint={s3_endpoint}&region=us-east-1&path_style=true")
    print(s3.stdout)
    assert s3.returncode == 0, s3.stdout + s3.stderr
    lines = s3.stdout.splitlines()
    assert len(lines) == 9 and not [l for l in lines if l.startswith("FAIL")], lines
    assert [l for l in lines if l.startswith("ok") and "bulk DELETE" in l]
    assert [l for l in lines if l.startswith("ok") and "missing bucket" in l]
    # moto checks no credentials: said, not passed. Other servers refuse them.
    from conftest import S3_SERVER
    credentials = [l for l in lines if "wrong credentials" in l]
    if S3_SERVER == "moto":
        assert "not checked" in credentials[0], credentials
    else:
        assert credentials[0].startswith("ok"), credentials
    assert [l for l in lines if l.startswith("ok") and "1,001 keys" in l]
    assert bucket_keys(s3_endpoint, "check/") == [], "the checks leave nothing behind"

    local = check(f"file://{tmp_path / 'objects'}")
    assert local.returncode == 0, local.stdout + local.stderr

    # A bucket that is not there: one line, S3's code and message, no XML.
    missing = check(f"s3://no-such-bucket/check?endpoint={s3_endpoint}&region=us-east-1"
                    "&path_style=true")
    assert missing.returncode != 0
    assert len(missing.stdout.splitlines()) == 1, missing.stdout
    assert "NoSuchBucket" in missing.stdout and "<" not in missing.stdout, missing.stdout

    down = check(f"s3://floe-test/x?endpoint=http://127.0.0.1:{free_port()}&region=us-east-1"
                 "&path_style=true&retry_timeout=1s&connect_timeout=1s&max_retries=1")
    assert down.returncode != 0
    assert "FAIL" in down.stdout and "checks failed" in down.stderr


def test_an_agent_refuses_another_clusters_store(s3_endpoint, tmp_path, metastore):
    """The metastore and the object store hold the cluster's id: an agent
    pointed at another prefix of the bucket than its cluster's, or a new
    metastore over an old cluster's objects, refuses to start in one line
    (instead of serving records the others cannot read)."""
    import subprocess

    from conftest import FLOE, Agent, free_port

    def url(prefix):
        return f"s3://floe-test/{prefix}?endpoint={s3_endpoint}&region=us-east-1&path_style=true"

    ours = Agent(tmp_path / "ours", "--metastore", metastore.address, "--object-store", url("ours"),
                 env=S3_KEYS)
    (tmp_path / "ours").mkdir()
    ours.start()
    try:
        deadline = time.time() + 30
        while time.time() < deadline and ours.admin("/readyz")[0] != 200:
            time.sleep(0.1)
        assert ours.admin("/readyz")[0] == 200, ours.log()

        def start(*args):
            return subprocess.run(
                [FLOE, "agent", "--listen", f"127.0.0.1:{free_port()}",
                 "--admin-listen", f"127.0.0.1:{free_port()}",
                 "--data-dir", str(tmp_path / f"data-{time.time_ns()}"), *args],
                capture_output=True, text=True, timeout=60,
                env={**__import__("os").environ, **S3_KEYS, "FLOE_LOG": "error"})

        elsewhere = start("--metastore", metastore.address, "--object-store", url("elsewhere"))
        assert elsewhere.returncode != 0
        lines = elsewhere.stderr.strip().splitlines()
        assert len(lines) == 1 and "holds no cluster id" in lines[0], elsewhere.stderr
        assert "s3://floe-test/elsewhere " in lines[0] and "endpoint=" not in lines[0], lines[0]

        # A new embedded metastore (its own data folder) over our objects.
        stranger = start("--object-store", url("ours"))
        assert stranger.returncode != 0
        lines = stranger.stderr.strip().splitlines()
        assert len(lines) == 1 and "belongs to cluster" in lines[0], stranger.stderr
    finally:
        ours.stop()
