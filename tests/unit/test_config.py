from pathlib import Path

import pytest

from icegres.config import OPTIONS, Settings, redact_uri, resolve
from icegres.pg.scram import Verifier, make_verifier, verify_plain

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_option_is_documented():
    text = DOC.read_text()
    for option in OPTIONS:
        assert option.env in text, option.key
        if option.key != "users":
            assert option.flag in text, option.key


def test_precedence_flag_env_file_default(tmp_path):
    cfg = tmp_path / "icegres.toml"
    cfg.write_text('port = 7000\nhost = "127.0.0.2"\ns3_region = "eu-west-1"\ns3_path_style = true\n')
    env = {"ICEGRES_CONFIG": str(cfg), "ICEGRES_PORT": "6000"}
    s = resolve({"port": 5000}, env)
    assert s.port == 5000  # flag beats env and file
    s = resolve({}, env)
    assert (s.port, s.host, s.s3_region, s.s3_path_style) == (6000, "127.0.0.2", "eu-west-1", True)
    assert resolve({}, {}) == Settings()


def test_unknown_config_key_is_an_error(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("prot = 1\n")
    with pytest.raises(ValueError, match="prot"):
        resolve({"config": str(cfg)}, {})


def test_users_from_file_and_env_are_verifiers(tmp_path):
    pg_made = make_verifier("x").format()  # what PostgreSQL's rolpassword holds
    pw = tmp_path / "pw"
    pw.write_text(f"a:1\n# comment\nb:2\nd:{pg_made}\ne:with, a comma\n")
    s = resolve({"password_file": str(pw)}, {"ICEGRES_USERS": "c:3,b:22"})
    assert sorted(s.users) == ["a", "b", "c", "d", "e"]
    assert all(isinstance(v, Verifier) for v in s.users.values())
    for user, password in (("a", "1"), ("b", "22"), ("c", "3"), ("d", "x"), ("e", "with, a comma")):
        assert verify_plain(s.users[user], password), user
    assert s.users["d"].format() == pg_made  # a verifier is taken as it is
    assert "22" not in repr(s) and s.auth_method == "scram-sha-256"


def test_malformed_verifier_and_auth_options_are_errors(tmp_path):
    with pytest.raises(ValueError, match="malformed SCRAM-SHA-256 verifier"):
        resolve({}, {"ICEGRES_USERS": "a:SCRAM-SHA-256$4096:zz"})
    with pytest.raises(ValueError, match="--auth-method must be one of"):
        resolve({"auth_method": "md5"}, {})
    with pytest.raises(ValueError, match="needs --jwt-issuer and --jwt-audience"):
        resolve({"jwt_jwks": "keys.json", "jwt_issuer": "https://idp"}, {})
    assert resolve({"auth_method": "PASSWORD"}, {}).auth_method == "password"


def test_secrets_are_redacted():
    s = Settings(catalog_uri="postgresql://ice:hunter2@db:5432/cat", s3_secret_key="topsecret",
                 catalog_credential="id:sekret", catalog_token="tok")
    shown = repr(s.redacted())
    for secret in ("hunter2", "topsecret", "sekret", "tok'"):
        assert secret not in shown
    assert redact_uri("postgresql://ice:hunter2@db/cat") == "postgresql://ice:***@db/cat"


def test_repr_hides_secrets():
    s = Settings(users={"u": "pw-xyz"}, s3_secret_key="sk-xyz", catalog_token="tok-xyz")
    assert "xyz" not in repr(s)


@pytest.mark.parametrize(("text", "expected"), [
    ("512", 512 << 20), ("256MB", 256 << 20), ("256 mb", 256 << 20), ("2GiB", 2 << 30), ("1.5g", 3 << 29),
    ("25%", 1 << 30), ("100%", 4 << 30),
])
def test_query_memory_takes_mib_sizes_and_shares(text, expected):
    from icegres.config import parse_size_bytes

    assert parse_size_bytes(text, total_bytes=4 << 30) == expected


@pytest.mark.parametrize("text", ["", "lots", "-5", "0%", "150%", "1MB", "12 parsecs"])
def test_query_memory_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="--query-memory"):
        resolve({"query_memory": text}, {})
