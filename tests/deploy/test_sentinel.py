"""The production overlay's Redis with Sentinel, run for real: the pods' init script
(deploy/kubernetes/overlays/production/redis-configure.sh, the very file the ConfigMap holds) configures
three "pods", each a ``redis-server`` and a Sentinel (Debian's redis-server, ``--sentinel``), on three
loopback addresses (127.0.0.2-4) standing for the pods' names. The set forms (one primary, two
replicas, three Sentinels that know each other), the primary is killed (SIGKILL of both its processes,
as a node lost), the Sentinels promote a replica that has what the primary acknowledged, and the pod
started again joins the new primary as its replica. Passwords are enforced throughout."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import Sentinel

from tests.conftest import stop_process
from tests.deploy._kit import KUBERNETES

SCRIPT = KUBERNETES / "overlays" / "production" / "redis-configure.sh"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PASSWORD = "a-url-safe-test-password"
DOWN_AFTER_MS = 1000  # the overlay waits 5 s; the test 1 s, to keep it short


def free_port_on(addresses: tuple[str, ...]) -> int:
    """A port no one listens on at any of ``addresses`` (every pod has the same ports, as in the cluster)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        try:
            for address in addresses[1:]:
                with socket.socket() as other:
                    other.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no common free port")


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Polls ``condition`` until it returns something true (errors count as not yet), or fails naming ``what``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
            last = result
        except (redis.RedisError, OSError) as error:
            last = error
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


@dataclass
class RedisPod:
    """One pod of the StatefulSet: its address stands for its name; its config directory is the pod's
    emptyDir (rewritten by its init script each start), its data directory the pod's volume."""

    address: str
    directory: Path
    port: int
    sentinel_port: int
    processes: list[subprocess.Popen] = field(default_factory=list)  # type: ignore[type-arg]

    def configure(self) -> None:
        """The init container: the script, with this set's names and ports."""
        config, data = self.directory / "config", self.directory / "data"
        config.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ["PATH"], "REDIS_PASSWORD": PASSWORD, "REDISCLI_AUTH": PASSWORD,
               "REDIS_SELF": self.address, "REDIS_PEERS": " ".join(ADDRESSES), "REDIS_BIND": self.address,
               "REDIS_PORT": str(self.port), "SENTINEL_PORT": str(self.sentinel_port), "CONFIG_DIR": str(config),
               "DATA_DIR": str(data), "SENTINEL_DOWN_AFTER_MS": str(DOWN_AFTER_MS)}
        subprocess.run(["sh", str(SCRIPT)], env=env, check=True, timeout=60)

    def start(self) -> None:
        """The pod's two containers (the image's redis-sentinel is redis-server in Sentinel mode)."""
        binary = shutil.which("redis-server")
        assert binary, "redis-server is required (`make .venv/.test-ready` installs Debian's package)"
        config = self.directory / "config"
        log = (self.directory / "redis.log").open("ab")
        self.processes = [subprocess.Popen([binary, str(config / "redis.conf")], stdout=log, stderr=log),
                          subprocess.Popen([binary, str(config / "sentinel.conf"), "--sentinel"], stdout=log, stderr=log)]
        wait_until(lambda: self.redis().ping() and self.sentinel().ping(), 20, f"{self.address} answers")

    def kill(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(10)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop_process(process)

    def redis(self, password: str = PASSWORD) -> redis.Redis:
        return redis.Redis(self.address, self.port, password=password, socket_timeout=2, decode_responses=True)

    def sentinel(self) -> redis.Redis:
        return redis.Redis(self.address, self.sentinel_port, password=PASSWORD, socket_timeout=2, decode_responses=True)

    def primary(self) -> str | None:
        """The primary this pod's Sentinel names."""
        named = self.sentinel().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
        return named[0] if named else None


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[RedisPod]]:
    port, sentinel_port = free_port_on(ADDRESSES), free_port_on(ADDRESSES)
    started = [RedisPod(address, tmp_path / f"pod-{i}", port, sentinel_port) for i, address in enumerate(ADDRESSES)]
    try:
        for pod in started:  # OrderedReady: one after the other
            pod.configure()
            pod.start()
        yield started
    finally:
        for pod in started:
            pod.stop()


def replicates_from(pod: RedisPod, primary: RedisPod) -> bool:
    info = pod.redis().info("replication")
    return info["role"] == "slave" and info["master_host"] == primary.address and info["master_link_status"] == "up"


def test_the_set_forms_fails_over_and_takes_its_old_primary_back(pods: list[RedisPod]) -> None:
    first, *others = pods
    # Formed: the first pod is the primary, the others replicate from it, every Sentinel names it and
    # knows the two others (they find each other through the primary).
    for pod in others:
        wait_until(lambda pod=pod: replicates_from(pod, first), 20, f"{pod.address} replicates")
    for pod in pods:
        assert pod.primary() == first.address
        wait_until(lambda pod=pod: int(pod.sentinel().execute_command("SENTINEL", "MASTER", "mymaster")[
            "num-other-sentinels"]) == 2, 20, "the Sentinels know each other")
    # Passwords are enforced on Redis and on the Sentinels.
    with pytest.raises(redis.AuthenticationError):
        first.redis("wrong").ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(first.address, first.sentinel_port, password="wrong").ping()

    # A client finds the primary through the Sentinels (as redis+sentinel:// does) and writes.
    sentinels = Sentinel([(pod.address, pod.sentinel_port) for pod in pods], sentinel_kwargs={"password": PASSWORD},
                         password=PASSWORD, socket_timeout=2, decode_responses=True)
    sentinels.master_for("mymaster").set("round:1", "kept")
    assert first.redis().execute_command("WAIT", 2, 5000) == 2  # both replicas have it

    # The primary's node is lost: a replica is promoted, with what the primary had acknowledged.
    lost_at = time.monotonic()
    first.kill()
    promoted_address = wait_until(lambda: others[0].primary() != first.address and others[0].primary(), 30,
                                  "a replica promoted")
    [promoted] = [pod for pod in others if pod.address == promoted_address]
    wait_until(lambda: promoted.redis().info("replication")["role"] == "master", 30, "the promoted replica is primary")
    failover_seconds = time.monotonic() - lost_at
    assert sentinels.master_for("mymaster").get("round:1") == "kept"
    assert failover_seconds < 15, failover_seconds  # down-after 1 s, then the election and promotion
    [remaining] = [pod for pod in others if pod is not promoted]
    wait_until(lambda: replicates_from(remaining, promoted), 30, "the other replica follows the new primary")

    # The lost pod is scheduled again: its init script asks the Sentinels, and it joins as a replica.
    first.configure()
    first.start()
    wait_until(lambda: replicates_from(first, promoted), 30, "the old primary replicates from the new one")
    assert first.redis().get("round:1") == "kept"
    wait_until(lambda: first.primary() == promoted.address, 20, "its Sentinel names the new primary")
    print(f"failover: {failover_seconds:.1f} s from SIGKILL to a promoted primary (down-after {DOWN_AFTER_MS} ms)")
