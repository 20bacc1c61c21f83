"""Fuzzing the two decoders of token logins, which read bytes a client chose before it has
logged in: JWT strings (protocol/tokens.py: the password field, a Flight SQL bearer header,
OAUTHBEARER's token) and OAUTHBEARER's initial response (pg/oauthbearer.py).

A token may only ever be accepted (the untouched valid one), or refused with TokenRejected; an
initial response may only parse or be refused with PgError (28000, 08P01, 0A000 as PostgreSQL). Anything else escaping
would end the connection with a traceback instead of an authentication failure. Inputs are valid
tokens and responses mutated byte by byte, their segments swapped and re-encoded with headers of
every JSON type, and random text.

Seeded: `ICEGRES_FUZZ_SEED=<seed> ICEGRES_FUZZ_INPUTS=<n>` reproduces a failure; CI runs
CI_INPUTS of each. A deep run: ICEGRES_FUZZ_INPUTS=100000 (docs/security.md records the last).
"""

from __future__ import annotations

import base64
import json
import os
import random

import pytest
import trio

from icegres.pg import oauthbearer
from icegres.pg.errors import PgError
from icegres.protocol.tokens import TokenConfig, TokenRejected, TokenValidator
from tests.support import idp

pytestmark = pytest.mark.unit

CI_INPUTS = 3000
KEY = idp.SigningKey.rsa("fuzz")
JSON_VALUES = [None, True, 0, -1, 1.5, 10**30, "", "RS256", "none", "HS256", "x" * 300, [], ["RS256"], {},
               {"alg": "RS256"}, "\u0000", "é"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json_segment(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        doc: object = {k: rng.choice(JSON_VALUES) for k in rng.sample(["alg", "kid", "typ", "crit", "jku", "x5u"],
                                                                     rng.randrange(4))}
        if rng.random() < 0.7:
            doc["alg"] = rng.choice(["RS256", "ES256", "PS256", "none", "HS256", ["RS256"], None, 7])  # type: ignore[index]
    elif pick < 0.8:
        doc = rng.choice(JSON_VALUES)
    else:
        return _b64(bytes(rng.randrange(256) for _ in range(rng.randrange(40))))
    return _b64(json.dumps(doc).encode())


def make_token(rng: random.Random, valid: str) -> str:
    pick = rng.random()
    if pick < 0.35:
        chars = list(valid)
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(len(chars))
            op = rng.random()
            if op < 0.4:
                chars[at] = rng.choice("ABCxyz019-_.=+/ \0é")
            elif op < 0.7:
                del chars[at:at + rng.randrange(1, 20)]
            else:
                chars.insert(at, rng.choice(".=\0"))
        return "".join(chars)
    if pick < 0.7:
        header, payload, signature = valid.split(".")
        parts = [rng.choice([header, _json_segment(rng)]), rng.choice([payload, _json_segment(rng)]),
                 rng.choice([signature, "", _b64(os.urandom(rng.randrange(80)))])]
        return ".".join(parts[: rng.choice([1, 2, 3, 3, 3, 4])] + ([""] if rng.random() < 0.1 else []))
    if pick < 0.8:
        return "eyJ" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
                               for _ in range(rng.randrange(200)))
    if pick < 0.9:
        return "a" * rng.choice([0, 1, 16 * 1024, 16 * 1024 + 1, 100_000])
    return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(64)))


def make_initial_response(rng: random.Random, token: str) -> bytes:
    good = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    pick = rng.random()
    if pick < 0.5:
        data = bytearray(rng.choice([good, b"n,,\x01\x01", b"y,,\x01auth=Bearer x\x01\x01",
                                     b"n,a=alice,\x01host=h\x01port=5\x01auth=bearer abc\x01\x01"]))
        for _ in range(rng.randrange(1, 5)):
            if not data:
                break
            at = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[at] = rng.randrange(256)
            elif op < 0.7:
                del data[at:]
            else:
                data[at:at] = rng.choice([b"\x01", b",", b"=", b"\0", b"\xff", b"auth=Bearer "])
        return bytes(data)
    return bytes(rng.randrange(256) for _ in range(rng.randrange(120)))


def _inputs() -> tuple[int, int]:
    seed = int(os.environ.get("ICEGRES_FUZZ_SEED", "0")) or random.randrange(1 << 32)
    return seed, int(os.environ.get("ICEGRES_FUZZ_INPUTS", str(CI_INPUTS)))


async def _inline(fn) -> None:
    fn()


def test_token_strings_are_accepted_whole_or_refused():
    jwks = json.dumps(idp.jwks(KEY)).encode()
    validator = TokenValidator(TokenConfig("file:///jwks.json", idp.ISSUER, idp.AUDIENCE), fetch=lambda _: jwks)
    valid = idp.mint(KEY, idp.claims("alice"))
    seed, count = _inputs()
    rng = random.Random(seed)

    async def run() -> dict[str, int]:
        assert await validator.role(valid, _inline) == "alice"
        seen = {"accepted": 0, "refused": 0}
        for index in range(count):
            token = make_token(rng, valid)
            try:
                role = await validator.role(token, _inline)
            except TokenRejected:
                seen["refused"] += 1
                continue
            except BaseException as exc:
                raise AssertionError(f"seed={seed} input={index}: {token[:200]!r}") from exc
            # Only a token that still carries the valid one's signature over its exact bytes passes.
            assert role == "alice" and token.split(".")[:3] == valid.split(".")[:3], (seed, index, token[:200])
            seen["accepted"] += 1
        return seen

    seen = trio.run(run)
    assert seen["refused"] > count // 2, seen


def test_oauthbearer_initial_responses_parse_or_are_refused():
    valid = idp.mint(KEY, idp.claims("alice"))
    seed, count = _inputs()
    rng = random.Random(seed)
    parsed = 0
    for index in range(count):
        data = make_initial_response(rng, valid)
        try:
            response = oauthbearer.parse_initial_response(data)
            response.bearer_token()
            parsed += 1
        except PgError as err:
            # PostgreSQL's classes here: 28 (refused), 08 (protocol), 0A (an authzid: unsupported).
            assert err.sqlstate[:2] in ("28", "08", "0A"), (seed, index, data[:200], err.sqlstate)
        except BaseException as exc:
            raise AssertionError(f"seed={seed} input={index}: {data[:200]!r}") from exc
    assert 0 < parsed < count
