"""API keys and their scopes (processors/gateway/keys.py): parsing, roles, collections."""

from __future__ import annotations

import pytest

from ragbus.gateway.keys import ApiKey, BadKey, allows, gather, match, parse_entry


def test_a_bare_key_is_admin_of_every_collection_as_before_roles():
    key = parse_entry(" sk-ops ")
    assert key == ApiKey(key="sk-ops", role="admin", collections=("*",))
    assert key.may("admin", "anything") and key.may("ingest", "x") and key.may("read")


def test_a_scoped_entry_has_its_role_and_collections_and_no_more():
    key = parse_entry("sk-team=ingest@handbook+faq")
    assert key.collections == ("handbook", "faq")
    assert key.may("read", "faq") and key.may("ingest", "handbook")
    assert not key.may("admin", "faq") and not key.may("read", "payroll")
    reader = parse_entry("sk-r=read@*")
    assert reader.may("read", "payroll") and not reader.may("ingest", "payroll")
    assert reader.shown(["a", "b"]) == ["a", "b"] and key.shown(["faq", "payroll", "handbook"]) == ["faq", "handbook"]


@pytest.mark.parametrize("entry, says", [
    ("sk-x=write@a", "ROLE@COLLECTION"), ("sk-x=read", "ROLE@COLLECTION"), ("sk-x=read@", "ROLE@COLLECTION"),
    ("=read@a", "has no key"),
])
def test_a_bad_entry_says_what_is_wrong_without_the_whole_key(entry, says):
    with pytest.raises(BadKey, match=says) as refused:
        parse_entry(entry)
    assert "sk-x=" not in str(refused.value)


def test_a_keys_file_adds_its_keys_and_the_first_scope_of_a_key_wins(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text('[[keys]]\nkey = "sk-file"\nrole = "read"\ncollections = ["a"]\n'
                    '[[keys]]\nkey = "sk-ops"\nrole = "read"\ncollections = ["a"]\n')
    keys = gather(["sk-ops"], str(path))
    assert [(k.key, k.role) for k in keys] == [("sk-ops", "admin"), ("sk-file", "read")]
    assert match(keys, b"sk-file").collections == ("a",) and match(keys, b"sk-nope") is None


@pytest.mark.parametrize("text", ['[[keys]]\nkey = "k"\nrole = "owner"\n', "not toml [", '[[keys]]\nrole = "read"\n'])
def test_a_bad_keys_file_is_a_clear_error(tmp_path, text):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(BadKey, match="keys file"):
        gather([], str(path))


def test_no_key_on_the_request_means_no_keys_configured_and_everything_allowed():
    assert allows({}, "admin", "any")
    scoped = {"state": {"ragbus.key": parse_entry("k=read@a")}}
    assert allows(scoped, "read", "a") and not allows(scoped, "read", "b") and not allows(scoped, "ingest", "a")
