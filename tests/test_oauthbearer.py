"""SASL/OAUTHBEARER with librdkafka: signed JWTs checked against a JSON Web
Key Set (issuer, expiry, key), their subject the principal ACLs are
checked for; unsecured tokens only when the agent is told to take them; a
session ending with its token, renewed by the client on its connection."""

import base64
import json
import socket
import struct
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from test_bad_input import string
from test_reauth import call

ISSUER = "https://issuer.test"


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """An RSA key that signs RS256 tokens, and its JWKS."""

    def __init__(self, kid):
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self):
        numbers = self.key.public_key().public_numbers()
        n, e = numbers.n, numbers.e
        return {"kty": "RSA", "kid": self.kid, "alg": "RS256", "use": "sig",
                "n": b64u(n.to_bytes((n.bit_length() + 7) // 8, "big")),
                "e": b64u(e.to_bytes((e.bit_length() + 7) // 8, "big"))}

    def token(self, sub, lifetime_s=300, iss=ISSUER):
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        claims = {"sub": sub, "iat": now, "exp": now + lifetime_s}
        if iss is not None:
            claims["iss"] = iss
        signing = b64u(json.dumps(header).encode()) + "." + b64u(json.dumps(claims).encode())
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing + "." + b64u(signature), now + lifetime_s


def client(agent, tokens, **extra):
    """Producer settings for OAUTHBEARER with tokens from `tokens()`."""
    def oauth_cb(_config):
        return tokens()
    return {"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb, **extra}


def produce(conf, topic, n=1, seconds=None):
    """Delivery errors of what was sent (n records, or one every 0.2 s for
    `seconds`), and whether authentication failed."""
    errors, auth_failed = [], []
    p = Producer({**conf, "message.timeout.ms": 8000,
                  "error_cb": lambda e: e.code() == KafkaError._AUTHENTICATION
                  and auth_failed.append(e)})
    started = time.time()
    sent = 0
    while sent < n or (seconds and time.time() - started < seconds):
        p.produce(topic, b"v", on_delivery=lambda e, m: e and errors.append(e.code()))
        sent += 1
        p.poll(0.2)
    p.flush(20)
    return errors, bool(auth_failed)


def raw_oauthbearer(agent, token):
    """SaslHandshake and SaslAuthenticate (v1) with `token`: the server's
    first answer's bytes, and the final error code."""
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        assert struct.unpack(">h", call(s, 17, 1, 1, string("OAUTHBEARER"))[:2])[0] == 0
        message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        error, auth_bytes = authenticate(s, 2, message)
        if error == 0 and auth_bytes:
            # An error challenge: the client's \x01 ends the exchange.
            error, _ = authenticate(s, 3, b"\x01")
        return auth_bytes, error


def authenticate(s, correlation_id, token):
    answer = call(s, 36, 1, correlation_id, struct.pack(">i", len(token)) + token)
    error = struct.unpack(">h", answer[:2])[0]
    message_len = struct.unpack(">h", answer[2:4])[0]
    rest = answer[4 + max(message_len, 0):]
    auth_len = struct.unpack(">i", rest[:4])[0]
    return error, rest[4:4 + max(auth_len, 0)]


def test_signed_tokens_are_checked_against_the_key_set(make_agent, tmp_path):
    good, other = Issuer("k1"), Issuer("k2")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [good.jwk()]}))
    agent = make_agent("--sasl-mechanisms", "OAUTHBEARER", "--sasl-oauthbearer-jwks", str(jwks),
                       "--sasl-oauthbearer-expected-issuer", ISSUER,
                       "--acls", "--super-users", "User:admin")
    admin = AdminClient(client(agent, lambda: good.token("admin")))
    admin.create_topics([NewTopic("tokens", 1)])["tokens"].result(timeout=30)

    alice = client(agent, lambda: good.token("alice"))
    assert produce(alice, "tokens")[0] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    acl = AclBinding(ResourceType.TOPIC, "tokens", ResourcePatternType.LITERAL, "User:alice",
                     "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    admin.create_acls([acl])[acl].result(timeout=30)
    deadline = time.time() + 20
    while produce(alice, "tokens")[0] != [] and time.time() < deadline:
        time.sleep(0.5)
    assert produce(alice, "tokens") == ([], False)

    # Another key (under its own kid, and forging the set's), another
    # issuer, no issuer: refused.
    forger = Issuer("k1")
    for refused in (lambda: other.token("alice"),
                    lambda: forger.token("alice"),
                    lambda: good.token("alice", iss="https://elsewhere.test"),
                    lambda: good.token("alice", iss=None)):
        errors, auth_failed = produce(client(agent, refused), "tokens")
        assert auth_failed and errors, errors
    # An expired token (librdkafka will not send one): RFC 7628's answer,
    # an error challenge, then SASL_AUTHENTICATION_FAILED.
    expired, _ = good.token("alice", lifetime_s=-120)
    assert raw_oauthbearer(agent, expired) == (json.dumps({"status": "invalid_token"},
                                                          separators=(",", ":")).encode(), 58)
    valid, _ = good.token("alice")
    assert raw_oauthbearer(agent, valid) == (b"", 0)
    none = (b64u(b'{"alg":"none"}') + "." +
            b64u(json.dumps({"sub": "admin", "exp": int(time.time()) + 60}).encode()) + ".")
    assert raw_oauthbearer(agent, none)[1] == 58, "unsecured tokens only when asked"
    unsecured = {"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_plaintext",
                 "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                 "sasl.oauthbearer.config": "principal=admin"}
    errors, auth_failed = produce(unsecured, "tokens")
    assert auth_failed, "unsecured tokens are taken only when asked"


def test_a_rotated_key_set_is_read_again(make_agent, tmp_path):
    old, new = Issuer("old"), Issuer("new")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [old.jwk()]}))
    agent = make_agent("--sasl-mechanisms", "OAUTHBEARER", "--sasl-oauthbearer-jwks", str(jwks))
    assert raw_oauthbearer(agent, old.token("alice")[0])[1] == 0
    assert raw_oauthbearer(agent, new.token("alice")[0])[1] == 58
    jwks.write_text(json.dumps({"keys": [new.jwk()]}))
    deadline = time.time() + 30  # looked at every 10 s
    while raw_oauthbearer(agent, new.token("alice")[0])[1] != 0 and time.time() < deadline:
        time.sleep(1)
    assert raw_oauthbearer(agent, new.token("alice")[0])[1] == 0
    assert raw_oauthbearer(agent, old.token("alice")[0])[1] == 58


def test_a_session_ends_with_its_token_and_the_client_renews_it(make_agent, tmp_path):
    issuer = Issuer("k1")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [issuer.jwk()]}))
    agent = make_agent("--sasl-mechanisms", "OAUTHBEARER", "--sasl-oauthbearer-jwks", str(jwks))
    # Tokens of 10 s: librdkafka fetches a new one and re-authenticates
    # before each ends (no --connections-max-reauth needed: the token's
    # expiry ends the session).
    errors, auth_failed = produce(client(agent, lambda: issuer.token("alice", lifetime_s=10)),
                                  "renewed", n=0, seconds=25)
    assert errors == [] and not auth_failed
    status, metrics = agent.admin("/metrics")
    renewed = [line for line in metrics.splitlines()
               if line.startswith("floe_sasl_reauthentications_total ")]
    assert renewed and float(renewed[0].split()[1]) >= 1, renewed


def test_unsecured_tokens_when_asked(make_agent):
    agent = make_agent("--sasl-mechanisms", "OAUTHBEARER", "--sasl-oauthbearer-unsecured")
    conf = {"bootstrap.servers": agent.bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice"}
    assert produce(conf, "unsecured") == ([], False)


def test_a_key_set_endpoint_is_fetched_and_follows_a_rotation(make_agent):
    """Kafka's sasl.oauthbearer.jwks.endpoint.url: the key set is fetched
    from the identity provider at start and again soon after a token names
    a key it does not hold (at most every 10 s, however many such tokens
    come), so a rotation needs no restart and no refresh interval."""
    import http.server
    import threading

    old, new = Issuer("old"), Issuer("new")
    served = {"keys": [old.jwk()]}
    fetches = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            fetches.append(time.time())
            body = json.dumps(served).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/jwks.json"
        agent = make_agent("--sasl-mechanisms", "OAUTHBEARER", "--sasl-oauthbearer-jwks", url,
                           "--sasl-oauthbearer-jwks-refresh", "1h")
        assert raw_oauthbearer(agent, old.token("alice")[0])[1] == 0
        assert len(fetches) == 1, "fetched once, at start"
        # The provider rotates its key; tokens signed with the new one are
        # refused until the agent fetches again, which they make it do.
        served["keys"] = [new.jwk()]
        deadline = time.time() + 30
        while raw_oauthbearer(agent, new.token("alice")[0])[1] != 0 and time.time() < deadline:
            time.sleep(0.5)
        assert raw_oauthbearer(agent, new.token("alice")[0])[1] == 0
        rotated = fetches[-1]
        assert raw_oauthbearer(agent, old.token("alice")[0])[1] == 58
        # Many tokens naming unknown keys: one fetch, 10 s after the last.
        before = len(fetches)
        for i in range(20):
            assert raw_oauthbearer(agent, Issuer(f"made-up-{i}").token("mallory")[0])[1] == 58
        time.sleep(max(0.0, rotated + 13 - time.time()))
        assert len(fetches) - before == 1, fetches
        assert fetches[-1] - rotated >= 9.5, fetches
    finally:
        server.shutdown()
