"""RayCluster.connect checks a cluster's address before Ray's own minutes of retries.

A stand-in for the ``ray`` module records what ``connect`` asks of it: these tests are about
tileauto's checks, made before ``ray.init`` (testing/integration/test_ray.py joins real
clusters).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tileauto.errors import TileautoError
from tileauto.scale.ray import cluster as ray_cluster
from tileauto.scale.ray.cluster import RayCluster


class FakeRay:
    def __init__(self, error: BaseException | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error = error

    def is_initialized(self) -> bool:
        return bool(self.calls) and self.error is None

    def init(self, address: str | None = None, **kwargs: Any) -> None:
        self.calls.append({"address": address, **kwargs})
        if self.error is not None:
            raise self.error


@pytest.fixture
def fake_ray(monkeypatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(ray_cluster, "import_ray", lambda: fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return fake


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound on loopback that does not listen: a connection there is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_an_address_where_nothing_answers_fails_before_ray_is_asked(fake_ray, closed_port):
    cluster = RayCluster(f"127.0.0.1:{closed_port}", source="TILEAUTO_RAY_ADDRESS")
    with pytest.raises(TileautoError) as info:
        cluster.connect()
    message = str(info.value)
    assert f"TILEAUTO_RAY_ADDRESS='127.0.0.1:{closed_port}'" in message
    assert "nothing answers" in message and "refused" in message
    assert "unset TILEAUTO_RAY_ADDRESS" in message
    assert fake_ray.calls == []


def test_an_address_that_answers_is_joined(fake_ray, listening_port):
    address = f"127.0.0.1:{listening_port}"
    RayCluster(address).connect()
    assert [call["address"] for call in fake_ray.calls] == [address]
    assert "_system_config" not in fake_ray.calls[0]  # settings only for a Ray of its own


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1", "host:port", ":6379"])
def test_a_malformed_address_names_what_was_expected(fake_ray, address):
    with pytest.raises(TileautoError, match=r"address must be 'auto' or a Ray cluster's host:port"):
        RayCluster(address).connect()
    assert fake_ray.calls == []


def test_a_ray_client_address_is_refused_with_what_to_do_instead(fake_ray, listening_port):
    """Ray Client does not carry streaming tasks (checked on Ray 2.60: "Streaming actor
    methods (num_returns="streaming") are not currently supported when using Ray Client")."""
    cluster = RayCluster(f"ray://127.0.0.1:{listening_port}", source="TILEAUTO_RAY_ADDRESS")
    with pytest.raises(TileautoError) as info:
        cluster.connect()
    message = str(info.value)
    assert message.startswith(f"TILEAUTO_RAY_ADDRESS='ray://127.0.0.1:{listening_port}'")
    assert "Ray Client (ray://) addresses are not supported" in message
    assert "`ray job submit`" in message
    assert fake_ray.calls == []


def test_ray_address_variable_is_checked_too(fake_ray, closed_port, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port}")
    with pytest.raises(TileautoError, match=r"^RAY_ADDRESS='127\.0\.0\.1:\d+': nothing answers"):
        RayCluster().connect()
    assert fake_ray.calls == []


def test_auto_without_a_cluster_says_what_to_do(monkeypatch):
    fake = FakeRay(ConnectionError("Could not find any running Ray instance."))
    monkeypatch.setattr(ray_cluster, "import_ray", lambda: fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cluster = RayCluster("auto", source="TILEAUTO_RAY_ADDRESS")
    with pytest.raises(TileautoError) as info:
        cluster.connect()
    message = str(info.value)
    assert message.startswith("TILEAUTO_RAY_ADDRESS='auto': no Ray cluster to join")
    assert "Could not find any running Ray instance" in message
    assert "`ray start --head`" in message
    assert [call["address"] for call in fake.calls] == ["auto"]


def test_an_address_that_answers_but_ray_cannot_join_says_what_to_check(
    monkeypatch, listening_port
):
    """Seen with a `ray start` cluster of Ray 2.60 whose token this process lacked: the port
    answers, Ray retries for 20 s and says only "Failed to connect to Ray cluster"."""
    fake = FakeRay(ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379"))
    monkeypatch.setattr(ray_cluster, "import_ray", lambda: fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = f"127.0.0.1:{listening_port}"
    with pytest.raises(TileautoError) as info:
        RayCluster(address, source="TILEAUTO_RAY_ADDRESS").connect()
    message = str(info.value)
    assert message.startswith(f"TILEAUTO_RAY_ADDRESS={address!r}: something answers there")
    assert "Failed to connect to Ray cluster" in message
    assert "GCS port" in message and "Ray version" in message and "RAY_AUTH_TOKEN" in message
    assert "`ray start --head`" not in message  # a cluster is there


def test_no_address_starts_a_local_ray_with_its_settings(fake_ray):
    RayCluster().connect()
    # "local": a new Ray even where `ray start` runs one (None would join that one)
    assert fake_ray.calls[0]["address"] == "local"
    assert fake_ray.calls[0]["_system_config"] == ray_cluster.LOCAL_SYSTEM_CONFIG


def test_ray_address_variable_is_left_to_ray(fake_ray, listening_port, monkeypatch):
    """Ray reads RAY_ADDRESS itself (and, under `ray job submit`, the job's runtime
    environment with it): tileauto checks the address and passes None."""
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{listening_port}")
    RayCluster().connect()
    assert fake_ray.calls[0]["address"] is None
    assert "_system_config" not in fake_ray.calls[0]
