"""The authorization model (pg/acl.py) by itself: PostgreSQL's rules as pure folds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.pg import acl
from icegres.pg.acl import EMPTY, Principal
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

ADMIN = Principal("admin", configured=True)
T = ("table", "s", "t")
S = ("schema", "s")


def _with_roles(*names: str, **attrs: object) -> acl.Authz:
    out = EMPTY
    for name in names:
        out = acl.create_role(out, ADMIN, name, dict(attrs), frozenset({"admin"}))
    return out


def test_the_owner_and_superusers_hold_everything_and_others_nothing_by_default() -> None:
    a = _with_roles("alice", login=True)
    alice = Principal("alice")
    assert a.has(ADMIN, T, "r")
    assert not a.has(alice, T, "r")
    assert a.explicit_acl(T) is None  # the default ACL: relacl is NULL
    with pytest.raises(PgError, match="permission denied for table t") as denied:
        a.require(alice, T, "r")
    assert denied.value.sqlstate == "42501"


def test_a_grant_materialises_the_owners_entry_first_as_postgresql_does() -> None:
    a, warnings = acl.grant(_with_roles("alice"), ADMIN, [T], "r", ["alice"], grant_option=False)
    assert warnings == []
    assert [i.text() for i in a.explicit_acl(T)] == ["icegres=arwdDxt/icegres", "alice=r/icegres"]
    assert a.has(Principal("alice"), T, "r") and not a.has(Principal("alice"), T, "a")


def test_public_grants_reach_every_role_and_the_public_schema_has_usage_for_all() -> None:
    a, _ = acl.grant(_with_roles("bob"), ADMIN, [T], "a", [acl.PUBLIC], grant_option=False)
    assert a.has(Principal("bob"), T, "a")
    assert [i.text() for i in a.explicit_acl(T)][-1] == "=a/icegres"
    assert a.has(Principal("bob"), ("schema", "public"), "U")
    assert not a.has(Principal("bob"), ("schema", "public"), "C")
    assert not a.has(Principal("bob"), S, "U")


def test_privileges_inherit_through_memberships_unless_noinherit() -> None:
    a = _with_roles("readers", "alice")
    a = acl.create_role(a, ADMIN, "carol", {"inherit": False}, frozenset({"admin"}))
    a, _ = acl.grant(a, ADMIN, [T], "r", ["readers"], grant_option=False)
    a = acl.grant_role(a, ADMIN, "readers", "alice", admin=False)
    a = acl.grant_role(a, ADMIN, "readers", "carol", admin=False)
    assert a.has(Principal("alice"), T, "r")
    assert not a.has(Principal("carol"), T, "r")  # NOINHERIT: only after SET ROLE readers
    assert "readers" in a.member_roles("carol")


def test_membership_loops_are_refused_with_postgresqls_message() -> None:
    a = acl.grant_role(_with_roles("x", "y"), ADMIN, "x", "y", admin=False)
    with pytest.raises(PgError, match='role "y" is a member of role "x"') as loop:
        acl.grant_role(a, ADMIN, "y", "x", admin=False)
    assert loop.value.sqlstate == "0LP01"
    with pytest.raises(PgError, match='role "x" is a member of role "x"'):
        acl.grant_role(a, ADMIN, "x", "x", admin=False)


def test_grant_option_lets_a_grantee_grant_and_revoke_cascades_to_what_it_granted() -> None:
    a, _ = acl.grant(_with_roles("alice", "bob"), ADMIN, [T], "r", ["alice"], grant_option=True)
    alice = Principal("alice")
    a, _ = acl.grant(a, alice, [T], "ra", ["bob"], grant_option=False)
    assert a.has(Principal("bob"), T, "r") and not a.has(Principal("bob"), T, "a")
    with pytest.raises(PgError) as dependent:
        acl.revoke(a, ADMIN, [T], "r", ["alice"], grant_option_only=False)
    assert dependent.value.sqlstate == "2BP01"
    a, _ = acl.revoke(a, ADMIN, [T], "r", ["alice"], grant_option_only=False, cascade=True)
    assert not a.has(Principal("bob"), T, "r") and not a.has(alice, T, "r")


def test_a_grant_by_a_holder_without_grant_option_grants_nothing_and_warns() -> None:
    a, _ = acl.grant(_with_roles("alice", "bob"), ADMIN, [T], "r", ["alice"], grant_option=False)
    b, warnings = acl.grant(a, Principal("alice"), [T], "r", ["bob"], grant_option=False)
    assert b == a and warnings == ['no privileges were granted for "t"']
    with pytest.raises(PgError, match="permission denied for table t"):
        acl.grant(a, Principal("bob"), [T], "r", ["alice"], grant_option=False)


def test_a_role_with_privileges_or_objects_cannot_be_dropped() -> None:
    a, _ = acl.grant(_with_roles("alice"), ADMIN, [T], "r", ["alice"], grant_option=False)
    with pytest.raises(PgError) as depends:
        acl.drop_role(a, ADMIN, "alice")
    assert depends.value.sqlstate == "2BP01" and depends.value.detail == "privileges for table s.t"
    a, _ = acl.revoke(a, ADMIN, [T], "r", ["alice"], grant_option_only=False)
    assert acl.drop_role(a, ADMIN, "alice").role("alice") is None


def test_only_superusers_and_createrole_roles_manage_roles() -> None:
    a = _with_roles("alice")
    with pytest.raises(PgError, match="permission denied to create role"):
        acl.create_role(a, Principal("alice"), "eve", {}, frozenset())
    a = acl.create_role(a, ADMIN, "manager", {"createrole": True}, frozenset())
    a = acl.create_role(a, Principal("manager"), "eve", {}, frozenset())
    with pytest.raises(PgError, match="permission denied to create role"):
        acl.create_role(a, Principal("manager"), "root2", {"superuser": True}, frozenset())
    with pytest.raises(PgError, match='role "eve" already exists'):
        acl.create_role(a, ADMIN, "eve", {}, frozenset())
    with pytest.raises(PgError, match='role name "pg_x" is reserved'):
        acl.create_role(a, ADMIN, "pg_x", {}, frozenset())


def test_owners_rename_and_drop_move_the_entries() -> None:
    a = acl.created(_with_roles("alice"), Principal("alice"), T)
    assert a.owner(T) == "alice" and a.owns(Principal("alice"), T)
    a, _ = acl.grant(a, Principal("alice"), [T], "r", [acl.PUBLIC], grant_option=False)
    moved = acl.renamed(a, T, ("table", "s", "u"))
    assert moved.owner(("table", "s", "u")) == "alice" and moved.explicit_acl(T) is None
    assert acl.dropped(moved, ("table", "s", "u")) == _with_roles("alice")
    b = acl.set_owner(a, ADMIN, T, "admin", frozenset({"admin"}))
    assert b.owner(T) == acl.BOOTSTRAP
    assert [i.text() for i in b.explicit_acl(T)] == ["icegres=arwdDxt/icegres", "=r/icegres"]


_names = st.sampled_from(["alice", "bob", "carol"])
_steps = st.lists(st.tuples(st.sampled_from(["grant", "revoke", "member"]), _names, _names,
                            st.sampled_from(["r", "a", "ra", "arwdDxt"]), st.booleans()), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_the_stored_form_is_exact_and_a_grant_then_its_revoke_leaves_no_privilege(steps) -> None:
    a = _with_roles("alice", "bob", "carol")
    for kind, x, y, letters, option in steps:
        try:
            if kind == "grant":
                a, _ = acl.grant(a, ADMIN, [T], letters, [x], grant_option=option)
            elif kind == "revoke":
                a, _ = acl.revoke(a, ADMIN, [T], letters, [x], grant_option_only=False, cascade=True)
            else:
                a = acl.grant_role(a, ADMIN, x, y, admin=option)
        except PgError:
            pass
        assert acl.from_json(acl.to_json(a)) == a
    a, _ = acl.grant(a, ADMIN, [T], "w", ["bob"], grant_option=False)
    a, _ = acl.revoke(a, ADMIN, [T], "w", ["bob"], grant_option_only=False, cascade=True)
    assert not any(i.grantee == "bob" and "w" in i.privs for i in a.acl(T))


def test_row_filters_follow_postgresqls_policy_rules() -> None:
    a = acl.created(_with_roles("alice", "bob", "owner"), Principal("owner"), T)
    alice, owner = Principal("alice"), Principal("owner")
    assert a.row_filter(alice, T, "select") is None  # row security off: nothing to add
    a = acl.set_row_security(a, owner, T, enable=True)
    assert a.row_filter(alice, T, "select") == "false"  # on, no policy: default deny
    assert a.row_filter(owner, T, "select") is None and a.row_filter(ADMIN, T, "select") is None
    a = acl.create_policy(a, owner, acl.Policy("p1", T, using="x = 1"))
    a = acl.create_policy(a, owner, acl.Policy("p2", T, command="select", roles=("bob",), using="x = 2"))
    a = acl.create_policy(a, owner, acl.Policy("r1", T, permissive=False, using="y > 0", check="y < 9"))
    assert a.row_filter(alice, T, "select") == "((x = 1)) AND (y > 0)"
    assert a.row_filter(Principal("bob"), T, "select") == "((x = 1) OR (x = 2)) AND (y > 0)"
    assert a.row_filter(Principal("bob"), T, "delete") == "((x = 1)) AND (y > 0)"
    assert a.row_check(alice, T, "insert") == "((x = 1)) AND (y < 9)"
    a = acl.set_row_security(a, owner, T, force=True)
    assert a.row_filter(owner, T, "select") == "((x = 1)) AND (y > 0)"  # FORCE: the owner too
    with pytest.raises(PgError, match="must be owner of relation t"):
        acl.drop_policy(a, alice, T, "p1")
    with pytest.raises(PgError, match='policy "p1" for table "t" already exists'):
        acl.create_policy(a, owner, acl.Policy("p1", T))
    assert acl.from_json(acl.to_json(a)) == a
    assert acl.dropped(a, T).policies == () and T not in acl.dropped(a, T).rls


def test_a_renamed_role_keeps_its_verifier_memberships_grants_and_objects() -> None:
    a = acl.create_role(_with_roles("grp"), ADMIN, "alice", {"login": True, "password": "SCRAM-SHA-256$x"}, frozenset())
    a = acl.grant_role(a, ADMIN, "grp", "alice", admin=False)
    a, _ = acl.grant(acl.created(a, Principal("alice"), T), ADMIN, [T], "r", ["grp"], grant_option=False)
    b = acl.rename_role(a, ADMIN, "alice", "alicia")
    assert b.role("alice") is None and b.role("alicia").password == "SCRAM-SHA-256$x"
    assert b.owner(T) == "alicia" and "grp" in b.member_roles("alicia")
    assert b.has(Principal("alicia"), T, "r")
