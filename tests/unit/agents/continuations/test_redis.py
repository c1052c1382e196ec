"""State URLs: every form ``open_store`` takes (Redis Sentinel's included) is checked before anything is
opened, a wrong one is refused saying what is wrong and never repeating a password, and logs show a
URL without its credentials."""

from __future__ import annotations

import pytest

from duet.agents.continuations import RedisContinuationStore, check_state_url, open_store, redacted_url
from duet.agents.continuations._redis import SentinelURL


@pytest.mark.parametrize("url", [
    "memory://", "sqlite:///.duet/state.db", "sqlite:////var/lib/duet/state.db", "redis://127.0.0.1:6379/0",
    "rediss://:secret@redis.example:6380/1", "unix:///run/redis.sock?db=2",
    "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/duet-state/0", "rediss+sentinel://user:pw@s1:26379/duet-state",
])
def test_usable_urls_pass(url: str) -> None:
    assert check_state_url(url) == url


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://host/x", "unsupported state URL scheme ftp://"),
    ("state.db", "unsupported state URL scheme (none)"),
    ("sqlite://state.db", "sqlite:///relative/path.db"),
    ("redis://:secret@host:port/0", "the port of a Redis URL is a number: redis://host:port/0"),
    ("redis+sentinel://s1:26379", "redis+sentinel://host:port[,host:port...]/service_name[/db]"),
    ("redis+sentinel://s1/duet-state", "a sentinel is host:port, got 's1'"),
    ("redis+sentinel://s1:26379/duet-state/zero", "the database of a Sentinel URL is a number"),
    ("redis+sentinel://s1:26379/duet-state/0?password=x", "unknown Sentinel URL option 'password'"),
])
def test_unusable_urls_say_what_is_wrong_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_state_url(url)
    assert problem in str(refused.value) and "secret" not in str(refused.value)


def test_a_sentinel_url_is_read_whole() -> None:
    url = SentinelURL("rediss+sentinel://app:p%40ss@[::1]:26379,10.0.0.2:26380/duet-state/3"
                      "?sentinel_password=s3&ssl_ca_certs=/etc/ca.pem")
    assert url.tls and url.sentinels == [("::1", 26379), ("10.0.0.2", 26380)]
    assert (url.service, url.db, url.username, url.password) == ("duet-state", 3, "app", "p@ss")
    assert url.options == {"sentinel_password": "s3", "ssl_ca_certs": "/etc/ca.pem"}


def test_logs_show_no_credentials() -> None:
    assert redacted_url("redis://:secret@127.0.0.1:6390/2") == "redis://127.0.0.1:6390/2"
    assert redacted_url("redis+sentinel://u:secret@s1:1,s2:2/svc/0?sentinel_password=x") == "redis+sentinel://s1:1,s2:2/svc/0"
    assert redacted_url("sqlite:///.duet/state.db") == "sqlite:///.duet/state.db"
    store = open_store("redis+sentinel://:secret@127.0.0.1:1,127.0.0.1:2/duet-state/1")
    assert isinstance(store.store, RedisContinuationStore) and str(store) == "redis+sentinel://127.0.0.1:1,127.0.0.1:2/duet-state/1"


def test_open_store_refuses_what_it_cannot_use_without_the_password() -> None:
    with pytest.raises(ValueError) as refused:
        open_store("mongodb://admin:secret@db:27017/duet")
    assert "mongodb://db:27017/duet" in str(refused.value) and "secret" not in str(refused.value)
