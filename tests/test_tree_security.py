"""Security between tiers (DESIGN §7, issue 3): TLS, mTLS and a bearer token, and gRPC health checking.

The PKI is made here with the `openssl` command: a self-signed CA, a server
certificate for localhost (SAN DNS:localhost, IP:127.0.0.1), client
certificates, and a second CA nobody trusts.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import telemetry
from collectors.agent.server import AgentServer
from collectors.common.transport import Security, make_channel
from helpers_tree import (
    SERVING,
    RawChild,
    counters,
    health_status,
    make_agent,
    make_collector,
    make_root,
    steps,
    stop_all,
    wait_for,
    window,
)
from telemetry.v1 import forward_pb2

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)


def _leaf(d: Path, name: str, ca: str, cn: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


class Pki:
    def __init__(self, d: Path) -> None:
        self.dir = d
        _ca(d, "ca")
        _ca(d, "rogue-ca")
        _leaf(d, "server", "ca", "localhost",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        _leaf(d, "client", "ca", "rack0", "extendedKeyUsage=clientAuth\n")
        _leaf(d, "rogue-client", "rogue-ca", "rack0", "extendedKeyUsage=clientAuth\n")
        _leaf(d, "san-client", "ca", "someone", "subjectAltName=DNS:agent-h7\nextendedKeyUsage=clientAuth\n")

    def path(self, name: str) -> Path:
        return self.dir / name

    def server(self, client_ca: bool = False, token: str | None = None) -> Security:
        return Security(cert=self.path("server.pem"), key=self.path("server.key"),
                        ca=self.path("ca.pem") if client_ca else None, token=token)

    def client(self, cert: str | None = None, ca: str = "ca", token: str | None = None) -> Security:
        return Security(cert=self.path(f"{cert}.pem") if cert else None, key=self.path(f"{cert}.key") if cert else None,
                        ca=self.path(f"{ca}.pem"), token=token, server_name="localhost")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _deliver(agent: AgentServer, job: str, world: int = 2, last_step: int = 3, timeout: float = 15.0) -> bool:
    runs = [telemetry.init(job=job, rank=r, world_size=world, agent=f"unix:{agent.socket_path}") for r in range(world)]
    for step in range(1, last_step + 1):
        for rank, run in enumerate(runs):
            run.log(step, loss=step + rank / 10)
            run.end_step(step)
    return all([run.close(timeout) for run in runs])


def _check(api: str, job: str, world: int = 2, last_step: int = 3) -> None:
    rows = steps(api, job, "loss")
    assert [(r["step"], r["count"], r["missing"]) for r in rows] == [(s, world, []) for s in range(1, last_step + 1)]


def _health(address: str, security: Security | None, service: str = "") -> int:
    with make_channel(address, security) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


# ---------------------------------------------------------------- TLS
def test_tls_tree_delivers_and_refuses_untrusting_clients(tmp_path, pki):
    root = make_root(tmp_path / "root.db", security=pki.server())
    rack = make_collector([root.address], "rack0", security=pki.server(), parent_security=pki.client())
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0", parent_security=pki.client())
    try:
        assert _deliver(agent, "tls"), "everything durable at the root over TLS"
        _check(root.api_address, "tls")
        assert rack.upstream.outbox.connected_to == root.address
        assert _health(root.address, pki.client()) == SERVING
        # Plaintext to a TLS port, and TLS from a client trusting another CA, get nowhere.
        with pytest.raises(grpc.RpcError) as plain:
            _health(root.address, None)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as rogue:
            _health(root.address, pki.client(ca="rogue-ca"))
        assert rogue.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stop_all(agent, rack, root)


def test_mtls_refuses_a_client_without_a_trusted_certificate(tmp_path, pki):
    root = make_root(tmp_path / "root.db", security=pki.server(client_ca=True))
    good = make_collector([root.address], "rack0", parent_security=pki.client(cert="client"))  # its cert's CN
    bare = make_collector([root.address], "rack-bare", parent_security=pki.client())
    rogue = make_collector([root.address], "rack-rogue", parent_security=pki.client(cert="rogue-client"))
    agent = make_agent([good.address], tmp_path / "a.sock", "agent-good")
    lost = make_agent([bare.address], tmp_path / "b.sock", "agent-bare")
    try:
        for security in (pki.client(), pki.client(cert="rogue-client")):
            with pytest.raises(grpc.RpcError) as refused:
                _health(root.address, security)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _health(root.address, pki.client(cert="client")) == SERVING
        assert _deliver(agent, "mtls"), "the rack with a client certificate delivers"
        _check(root.api_address, "mtls")
        assert not _deliver(lost, "nocert", world=1, timeout=1.0), "the rack without a certificate cannot deliver"
        assert bare.upstream.outbox.connected_to is None and rogue.upstream.outbox.connected_to is None
        assert bare.upstream.outbox.pending() > 0, "the refused rack keeps what it could not deliver"
        assert steps(root.api_address, "nocert", "loss") == []
    finally:
        stop_all(agent, lost, good, bare, rogue, root)


def test_mtls_binds_a_childs_sender_id_to_its_certificate(tmp_path, pki):
    """Issue 14 item 5: under mTLS a child's sender_id must be a name its certificate vouches for (subject CN
    or a subjectAltName); another is refused PERMISSION_DENIED and counted, so a child holding a valid
    certificate still cannot speak (and take DURABLE acks) for another child. A real collector whose --id
    does not match its certificate delivers nothing and keeps its data."""
    root = make_root(tmp_path / "root.db", security=pki.server(client_ca=True))
    impostor = make_collector([root.address], "agent-h7", parent_security=pki.client(cert="client"))
    agent = make_agent([impostor.address], tmp_path / "a.sock", "agent0")
    children = []
    try:
        for cert, sender, allowed in (("client", "agent-h7", False), ("client", "rack0", True),
                                      ("san-client", "agent-h7", True), ("san-client", "someone", True),
                                      ("san-client", "rack0", False)):
            child = RawChild(root.address, sender, channel=make_channel(root.address, pki.client(cert=cert)))
            children.append(child)
            ack = child.ack()
            if allowed:
                assert ack is not None and ack.seq == 0, (cert, sender, child.error)
            else:
                assert ack is None, (cert, sender)
                assert child.error.code() == grpc.StatusCode.PERMISSION_DENIED
                assert f"sender_id '{sender}' is not an identity of this client's certificate" in \
                    child.error.details()
        assert root.node.counters["bad_inputs"] >= 2  # the two raw children, and each try of the impostor rack
        assert not _deliver(agent, "impostor", world=1, timeout=1.0), "the mismatched rack cannot deliver"
        assert impostor.upstream.outbox.pending() > 0, "... and keeps what it could not deliver"
        assert steps(root.api_address, "impostor", "loss") == []
    finally:
        for child in children:
            child.close()
        stop_all(agent, impostor, root)


# ---------------------------------------------------------------- bearer token
def test_bearer_token_is_required_and_checked(tmp_path):
    root = make_root(tmp_path / "root.db", security=Security(token="s3cret"))
    children = []
    try:
        for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", "s3cret"),)):
            child = RawChild(root.address, "anon", metadata=metadata)
            children.append(child)
            assert child.ack() is None, "the stream is refused"
            assert child.error.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "token" in child.error.details()
        child = RawChild(root.address, "ok", metadata=(("authorization", "Bearer s3cret"),))
        children.append(child)
        ack = child.ack()
        assert ack is not None and ack.seq == 0 and ack.status == forward_pb2.Ack.RECEIVED
        seq = child.batch(window("tok", "loss", 1, {0: 1.0}, expected=1))
        child.ack_for(seq, forward_pb2.Ack.DURABLE)
        # Health checking needs no token.
        assert health_status(root.address) == SERVING
        assert counters(root)["bad_inputs"] == 0
    finally:
        for child in children:
            child.close()
        stop_all(root)


def test_token_over_mtls_end_to_end_and_a_wrong_token_delivers_nothing(tmp_path, pki):
    root = make_root(tmp_path / "root.db", security=pki.server(client_ca=True, token="t0ken"))
    rack = make_collector([root.address], "rack0", parent_security=pki.client(cert="client", token="t0ken"))
    liar = make_collector([root.address], "rack1", parent_security=pki.client(cert="client", token="guess"))
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0")
    other = make_agent([liar.address], tmp_path / "b.sock", "agent1")
    try:
        assert _deliver(agent, "secure")
        _check(root.api_address, "secure")
        assert not _deliver(other, "liar", world=1, timeout=1.0)
        assert liar.upstream.outbox.pending() > 0
        assert steps(root.api_address, "liar", "loss") == []
    finally:
        stop_all(agent, other, rack, liar, root)


# ---------------------------------------------------------------- health
def test_every_server_answers_health_checks(tmp_path, pki):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    tls_rack = make_collector([root.address], "rack1", security=pki.server(client_ca=True, token="x"))
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0", tcp="127.0.0.1:0")
    try:
        for address in (root.address, rack.address):
            assert health_status(address) == SERVING
            assert health_status(address, "telemetry.v1.Collector") == SERVING
        assert _health(tls_rack.address, pki.client(cert="client")) == SERVING
        assert _health(tls_rack.address, pki.client(cert="client"), "telemetry.v1.Collector") == SERVING
        assert len(agent.addresses) == 2
        for address in agent.addresses:
            assert health_status(address) == SERVING
            assert health_status(address, "telemetry.v1.Agent") == SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            health_status(root.address, "no.such.Service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        wait_for(lambda: agent.upstream.outbox.connected_to == rack.address, 5, what="the agent's stream")
    finally:
        stop_all(agent, tls_rack, rack, root)
