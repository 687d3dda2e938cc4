"""The API's body parsers and Accept negotiation, and its config section."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.api import formats
from raetsalt.api.config import ApiConfig, load
from raetsalt.errors import ConfigError

TYPES = st.sampled_from([*formats.IN_TYPES, "application/xml", ""])


@given(TYPES, st.binary(max_size=2048))
def test_any_body_parses_or_is_refused_with_a_status(content_type: str, raw: bytes) -> None:
    try:
        formats.parse(content_type, raw)
    except formats.BadBody as exc:
        assert exc.status in (400, 406)


@given(st.text(max_size=300))
def test_any_yaml_text_parses_or_is_refused(text: str) -> None:
    try:
        formats.parse("application/x-yaml", text.encode())
    except formats.BadBody as exc:
        assert exc.status == 400


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20))
def test_json_round_trips(value: object) -> None:
    assert formats.parse("application/json", json.dumps(value).encode()) == value


def test_form_bodies() -> None:
    assert formats.parse("application/x-www-form-urlencoded",
                         b"client=local&tgt=*&fun=test.arg&arg=a&arg=b") == {
        "client": "local", "tgt": "*", "fun": "test.arg", "arg": ["a", "b"]}
    assert formats.parse("application/x-www-form-urlencoded", b"arg=one")["arg"] == ["one"]


def test_yaml_tags_and_aliases_are_refused() -> None:
    for raw in (b"!!python/object/apply:os.system [id]", b"a: &x [1]\nb: *x\n"):
        with pytest.raises(formats.BadBody):
            formats.parse("application/x-yaml", raw)


@given(st.text(max_size=200))
def test_any_accept_header_gives_a_type_or_none(accept: str) -> None:
    assert formats.choose(accept) in (None, *formats.OUT_TYPES)


@pytest.mark.parametrize(("accept", "media"), [
    (None, formats.JSON),
    ("*/*", formats.JSON),
    ("application/x-yaml", formats.YAML),
    ("application/json;q=0.5, application/x-yaml", formats.YAML),
    ("text/yaml", formats.YAML),
    ("text/html", None),
    ("application/json;q=0", None),
])
def test_accept(accept: str | None, media: str | None) -> None:
    assert formats.choose(accept) == media


def test_config_defaults_need_tls_or_disable_ssl() -> None:
    with pytest.raises(ConfigError, match="ssl_crt"):
        load({"rest_cherrypy": {"port": 8000}})
    config, unknown = load({"rest_cherrypy": {"disable_ssl": True, "collect_stats": True,
                                              "frobnicate": 1}})
    assert config == ApiConfig(disable_ssl=True) and unknown == ["frobnicate"]


@pytest.mark.parametrize(("section", "message"), [
    ({"disable_ssl": True, "port": "8000"}, "port"),
    ({"disable_ssl": True, "port": 70000}, "port"),
    ({"disable_ssl": True, "thread_pool": True}, "thread_pool"),
    ({"disable_ssl": True, "webhook_url": "hook"}, "webhook_url"),
    ({"disable_ssl": True, "app": "/nonexistent/index.html"}, "app"),
    ({"ssl_crt": "/nonexistent.crt", "ssl_key": "/nonexistent.key"}, "ssl_crt"),
])
def test_bad_config_is_named(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load({"rest_cherrypy": section})
