"""Bearer tokens to user ids: StaticTokenAuth, JWTAuth, user_of and the 401 over HTTP."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import jwt
import pytest
from fastapi import Depends, FastAPI

from headwater.errors import UserError
from headwater.gateway.auth import (
    DEV_USER,
    Authenticator,
    JWTAuth,
    StaticTokenAuth,
    auth_from_settings,
    bearer_token,
    is_loopback,
    user_dependency,
    user_of,
)
from headwater.gateway.limits import RequestLimits
from headwater.gateway.problems import GatewayHTTPError, install_error_handlers
from headwater.settings import Settings

from .conftest import Serve

KEY = "a-test-hmac-key-" * 5  # 75 bytes: long enough for HS512 too
OTHER_KEY = "another-test-hmac-key-" * 4


# --- StaticTokenAuth ---------------------------------------------------------------------


async def test_static_tokens_map_to_their_users_and_nothing_else() -> None:
    auth = StaticTokenAuth({"tok-alice": "alice", "tok-bob": "bob"})
    assert await auth("tok-alice") == "alice"
    assert await auth("tok-bob") == "bob"
    for wrong in ("tok-", "tok-alic", "tok-alicee", "TOK-ALICE", "", "alice"):
        assert await auth(wrong) is None


@pytest.mark.parametrize("tokens", [{}, {"": "alice"}, {"tok": ""}])
def test_static_tokens_refuse_an_empty_table_token_or_user(tokens: dict[str, str]) -> None:
    with pytest.raises(UserError):
        StaticTokenAuth(tokens)


# --- JWTAuth -----------------------------------------------------------------------------


def token(claims: dict[str, Any], key: str = KEY, algorithm: str = "HS256") -> str:
    return jwt.encode({"exp": int(time.time()) + 60, **claims}, key, algorithm=algorithm)


async def test_a_valid_jwt_gives_its_subject() -> None:
    auth = JWTAuth(KEY, ["HS256"], audience="api", issuer="https://issuer.test")
    good = token({"sub": "alice", "aud": "api", "iss": "https://issuer.test"})
    assert await auth(good) == "alice"


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "alice", "exp": int(time.time()) - 10},  # expired
        {"sub": "alice", "nbf": int(time.time()) + 600},  # not yet valid
        {"sub": "alice", "aud": "other"},  # wrong audience
        {"sub": "alice"},  # no audience at all
        {"sub": "alice", "aud": "api", "iss": "https://evil.test"},  # wrong issuer
        {"aud": "api"},  # no subject
        {"sub": "", "aud": "api"},  # empty subject
        {"sub": 42, "aud": "api"},  # not a string
    ],
)
async def test_a_jwt_failing_a_check_is_refused(claims: dict[str, Any]) -> None:
    auth = JWTAuth(KEY, ["HS256"], audience="api", issuer="https://issuer.test")
    bad = jwt.encode({"exp": int(time.time()) + 60, "iss": "https://issuer.test", **claims},
                     KEY, algorithm="HS256")
    assert await auth(bad) is None


async def test_a_jwt_signed_otherwise_is_refused() -> None:
    auth = JWTAuth(KEY, ["HS256"])
    assert await auth(token({"sub": "alice"})) == "alice"
    assert await auth(token({"sub": "alice"}, key=OTHER_KEY)) is None
    assert await auth(token({"sub": "alice"}, algorithm="HS512")) is None  # not allowed
    unsigned = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None,
                          algorithm="none")
    assert await auth(unsigned) is None
    assert await auth(unsigned.rsplit(".", 1)[0] + ".") is None


async def test_a_token_that_is_no_jwt_is_refused_without_raising() -> None:
    auth = JWTAuth(KEY, ["HS256"])
    for garbage in ("", "x", "a.b.c", "a.b", "ünïcode.☃.x", token({"sub": "a"})[:-3]):
        assert await auth(garbage) is None


async def test_a_jwt_audience_it_was_not_configured_for_is_refused() -> None:
    assert await JWTAuth(KEY, ["HS256"])(token({"sub": "alice", "aud": "api"})) is None


async def test_exp_is_required_unless_told_otherwise() -> None:
    forever = jwt.encode({"sub": "alice"}, KEY, algorithm="HS256")
    assert await JWTAuth(KEY, ["HS256"])(forever) is None
    assert await JWTAuth(KEY, ["HS256"], require_exp=False)(forever) == "alice"
    lenient = JWTAuth(KEY, ["HS256"], require_exp=False)
    assert await lenient(token({"sub": "alice", "exp": int(time.time()) - 10})) is None


async def test_leeway_and_a_custom_user_claim() -> None:
    auth = JWTAuth(KEY, ["HS256"], user_claim="uid", leeway=60)
    just_expired = token({"uid": "u-7", "sub": "ignored", "exp": int(time.time()) - 5})
    assert await auth(just_expired) == "u-7"


@pytest.mark.parametrize(
    ("key", "algorithms"),
    [
        (KEY, []),
        (KEY, "HS256"),  # a string, not a list
        (KEY, ["none"]),
        (KEY, ["HS256", "NONE"]),
        (KEY, ["XS999"]),
        ("short", ["HS256"]),  # below the algorithm's minimum key length
        ("", ["HS256"]),
    ],
)
def test_jwt_auth_refuses_a_bad_configuration(key: str, algorithms: Any) -> None:
    with pytest.raises(UserError):
        JWTAuth(key, algorithms)


# --- user_of -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [("Bearer t", "t"), ("bearer t", "t"), ("BEARER  t ", "t"), (None, None), ("", None),
     ("Basic dXNlcjpwYXNz", None), ("Bearer", None), ("Bearer a b", None), ("t", None)],
)
def test_bearer_token_parsing(header: str | None, expected: str | None) -> None:
    assert bearer_token(header) == expected


async def test_dev_mode_is_one_local_user_whatever_the_header() -> None:
    assert await user_of(None, None) == DEV_USER
    assert await user_of(None, "Bearer whatever") == DEV_USER


@pytest.mark.parametrize("header", [None, "Basic x", "Bearer", "Bearer a b", "tok-alice"])
async def test_a_missing_or_malformed_header_is_401_without_invalid_token(
        header: str | None) -> None:
    with pytest.raises(GatewayHTTPError) as caught:
        await user_of(StaticTokenAuth({"tok-alice": "alice"}), header)
    assert (caught.value.code, caught.value.status) == ("unauthorized", 401)
    assert caught.value.headers == {"WWW-Authenticate": "Bearer"}


async def test_a_refused_token_is_401_invalid_token() -> None:
    with pytest.raises(GatewayHTTPError) as caught:
        await user_of(StaticTokenAuth({"tok-alice": "alice"}), "Bearer tok-bob")
    assert caught.value.status == 401
    assert caught.value.headers == {"WWW-Authenticate": 'Bearer error="invalid_token"'}


async def test_the_scheme_is_case_insensitive() -> None:
    assert await user_of(StaticTokenAuth({"t": "alice"}), "bearer t") == "alice"


async def test_a_custom_async_callable_is_an_authenticator() -> None:
    async def by_prefix(tok: str) -> str | None:
        return tok.removeprefix("user-") if tok.startswith("user-") else None

    assert await user_of(by_prefix, "Bearer user-carol") == "carol"
    with pytest.raises(GatewayHTTPError):
        await user_of(by_prefix, "Bearer carol")


async def test_an_authenticator_answering_an_empty_id_is_refused() -> None:
    async def empty(tok: str) -> str | None:
        return ""

    with pytest.raises(GatewayHTTPError):
        await user_of(empty, "Bearer x")


# --- over HTTP ---------------------------------------------------------------------------


def whoami_app(auth: Authenticator | None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(RequestLimits)

    @app.get("/me")
    async def me(user: str = Depends(user_dependency(auth))) -> dict[str, str]:
        return {"user": user}

    return app


async def test_401_over_http_carries_the_envelope_and_the_challenge(serve: Serve) -> None:
    base = await serve(whoami_app(StaticTokenAuth({"tok-alice": "alice"})))
    async with httpx.AsyncClient(base_url=base) as client:
        ok = await client.get("/me", headers={"Authorization": "Bearer tok-alice"})
        missing = await client.get("/me")
        refused = await client.get("/me", headers={"Authorization": "Bearer tok-bob"})
        basic = await client.get("/me", auth=("alice", "tok-alice"))
    assert ok.status_code == 200 and ok.json() == {"user": "alice"}
    for response in (missing, refused, basic):
        assert response.status_code == 401
        assert response.headers["cache-control"] == "no-store"
        error = response.json()["error"]
        assert error["code"] == "unauthorized"
        assert error["request_id"] == response.headers["x-request-id"]
    assert missing.headers["www-authenticate"] == "Bearer"
    assert basic.headers["www-authenticate"] == "Bearer"
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'


async def test_an_authenticator_that_raises_is_a_logged_401_without_its_text(
        serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(tok: str) -> str | None:
        raise RuntimeError("db password=hunter2 unreachable")

    base = await serve(whoami_app(broken))
    with caplog.at_level(logging.ERROR, logger="headwater.gateway"):
        async with httpx.AsyncClient(base_url=base) as client:
            response = await client.get("/me", headers={"Authorization": "Bearer x"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert "hunter2" not in response.text
    assert all("hunter2" not in value for value in response.headers.values())
    logged = [r for r in caplog.records if r.name == "headwater.gateway" and r.exc_info]
    assert logged and "hunter2" in str(logged[0].exc_info[1])  # type: ignore[index]


async def test_dev_mode_over_http_needs_no_header(serve: Serve) -> None:
    base = await serve(whoami_app(None))
    async with httpx.AsyncClient(base_url=base) as client:
        response = await client.get("/me")
    assert response.json() == {"user": DEV_USER}


# --- is_loopback -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("LOCALHOST", True), ("::ffff:127.0.0.1", True),
     ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.1", False),
     ("192.168.1.5", False), ("example.com", False), ("localhost.example.com", False),
     ("128.0.0.1", False)],
)
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


# -- auth_from_settings: headwater serve's auth from HEADWATER_AUTH_TOKENS / HEADWATER_JWT_* -------

def _settings(**values: Any) -> Settings:
    return Settings(**values)


def test_no_auth_settings_is_dev_mode() -> None:
    assert auth_from_settings(_settings()) is None
    assert auth_from_settings(_settings(auth_tokens="  ")) is None


async def test_token_pairs_split_at_their_last_equals_sign() -> None:
    auth = auth_from_settings(_settings(auth_tokens="t1=alice, dG9r==bob\n t3=carol"))
    assert isinstance(auth, StaticTokenAuth)
    assert [await auth(t) for t in ("t1", "dG9r=", "t3", "t4", "dG9r")] == [
        "alice", "bob", "carol", None, None]


async def test_a_token_file_with_comments(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text("# the gateway's callers\nt1=alice\n\n  # ops\nt2=bob, t3=bob\n")
    auth = auth_from_settings(_settings(auth_tokens=str(path)))
    assert auth is not None
    assert [await auth(t) for t in ("t1", "t2", "t3", "# ops")] == ["alice", "bob", "bob", None]
    path.write_text("# nothing yet\n")
    with pytest.raises(UserError, match=r"^HEADWATER_AUTH_TOKENS file .*: no token=user entry$"):
        auth_from_settings(_settings(auth_tokens=str(path)))


async def test_jwt_settings_make_a_jwt_auth(tmp_path: Any) -> None:
    auth = auth_from_settings(_settings(jwt_key=KEY, jwt_algorithms="HS384, HS256",
                                        jwt_audience="api", jwt_issuer="iss",
                                        jwt_user_claim="email", jwt_leeway=5))
    assert isinstance(auth, JWTAuth)
    claims = {"email": "a@example.com", "aud": "api", "iss": "iss",
              "exp": int(time.time()) - 2}  # expired, within the leeway
    assert await auth(jwt.encode(claims, KEY, algorithm="HS256")) == "a@example.com"
    assert await auth(jwt.encode({**claims, "iss": "other"}, KEY, algorithm="HS256")) is None
    key = tmp_path / "key"
    key.write_text(KEY)
    from_file = auth_from_settings(_settings(jwt_key_file=str(key), jwt_algorithms="HS256",
                                             jwt_audience="api", jwt_issuer="iss",
                                             jwt_user_claim="email", jwt_leeway=5))
    assert from_file is not None
    assert await from_file(jwt.encode(claims, KEY, algorithm="HS256")) == "a@example.com"


@pytest.mark.parametrize(("values", "message"), [
    ({"auth_tokens": "secret-token"}, "neither token=user pairs nor the path"),
    ({"auth_tokens": "a=b a=c"}, "entry 2 repeats a token"),
    ({"auth_tokens": "a=b", "jwt_key": KEY}, "not both"),
    ({"jwt_key": KEY, "jwt_key_file": "/k"}, "not both"),
    ({"jwt_key": KEY}, "needs HEADWATER_JWT_ALGORITHMS"),
    ({"jwt_key": KEY, "jwt_algorithms": " , "}, "needs HEADWATER_JWT_ALGORITHMS"),
    ({"jwt_algorithms": "HS256"}, "no HEADWATER_JWT_KEY"),
    ({"jwt_key": "short", "jwt_algorithms": "HS256"}, r"^HEADWATER_JWT_\*: JWTAuth: "),
    ({"jwt_key_file": "/nonexistent", "jwt_algorithms": "HS256"},
     r"HEADWATER_JWT_KEY_FILE: cannot read /nonexistent \(No such file"),
])
def test_bad_auth_settings_name_the_setting_not_the_secret(values: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(UserError, match=message) as raised:
        auth_from_settings(_settings(**values))
    assert "secret-token" not in str(raised.value) and KEY not in str(raised.value)


def test_settings_do_not_show_the_secrets() -> None:
    settings = _settings(auth_tokens="secret-token=alice", jwt_key=KEY)
    assert "secret-token" not in repr(settings) and KEY not in repr(settings)
