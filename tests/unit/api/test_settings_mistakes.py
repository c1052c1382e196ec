"""Configuration that catches mistakes: a ``DUET_*`` variable that is no setting is named, with the
setting it was likely meant to be; a state URL that cannot work names its variable, not its password."""

from __future__ import annotations

import pytest

from duet.api._settings import ConfigError, load_settings, setting_variables, unknown_variables


def test_a_typo_is_named_with_the_setting_it_was_meant_to_be() -> None:
    environ = {"DUET_API_KEY": "secret", "DUET_STATE_URl": "x", "DUET_STORE_TIMEOUT": "1", "duet_workers": "2",
               "DUET_PUBLISH": "0.0.0.0", "DUET_WHATEVER_ELSE": "1", "PATH": "/bin", "DUET_REASONER_API_KEY": "k"}
    assert unknown_variables(environ) == [
        "DUET_API_KEY is not a Duet setting and is ignored: did you mean DUET_API_KEYS?",
        "DUET_WHATEVER_ELSE is not a Duet setting and is ignored (duet serve --help lists them)",
    ]  # DUET_STATE_URl and duet_workers are read (the settings ignore case); DUET_PUBLISH is docker-compose's


def test_every_setting_is_a_known_variable() -> None:
    assert {"DUET_API_KEYS", "DUET_STATE_URL", "DUET_WORKERS", "DUET_ANSWER_API_KEY", "DUET_LOG_FORMAT"} <= set(setting_variables())
    assert unknown_variables({name: "1" for name in setting_variables()}) == []


def test_a_state_url_error_names_its_variable_and_hides_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_STATE_URL", "redis+sentinel://:secret@s1/duet-state")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert str(refused.value) == "DUET_STATE_URL=redis+sentinel://s1/duet-state: a sentinel is host:port, got 's1'"
    monkeypatch.setenv("DUET_STATE_URL", "postgres://db/duet")
    with pytest.raises(ConfigError, match=r"^DUET_STATE_URL=postgres://db/duet: unsupported state URL scheme postgres://"):
        load_settings()
