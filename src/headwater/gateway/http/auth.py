"""Who is calling: bearer tokens to user ids.

An :data:`Authenticator` is any async callable ``(token) -> user_id | None``.
Two ship here: :class:`StaticTokenAuth` (a fixed table, for small deployments
and tests) and :class:`JWTAuth` (signed JSON Web Tokens, through PyJWT).
:func:`user_of` turns an ``Authorization`` header into a user id or a 401.

The user comes only from the token, never from a body, a path or a query:
a session, run or call of another user answers 404 exactly like a missing one
(docs/frame-protocol.md, decision 6), which the routes decide with the id returned here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import jwt
from starlette.requests import HTTPConnection

from ...core.errors import UserError
from .problems import GatewayHTTPError

if TYPE_CHECKING:
    from jwt.algorithms import AllowedPublicKeys

    from ...core.settings import Settings

logger = logging.getLogger("headwater.gateway")

Authenticator = Callable[[str], Awaitable[str | None]]
"""An async callable taking a bearer token and answering its user id, or ``None`` to refuse."""

DEV_USER: Final = "local"
"""The one user of dev mode (no authenticator)."""

_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.", "ip6-localhost"})


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class StaticTokenAuth:
    """A fixed table of tokens and the users they stand for.

    ``StaticTokenAuth({"s3cr3t-token": "alice"})``. Tokens are kept only as
    SHA-256 digests and looked up by digest, so the time an answer takes does
    not tell how much of a guessed token was right.

    Raises:
        UserError: at construction, for an empty table, an empty token or an
            empty user id.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise UserError("StaticTokenAuth needs at least one token: {'token': 'user_id'}")
        if not all(isinstance(t, str) and t for t in tokens):
            raise UserError("StaticTokenAuth: every token must be a non-empty string")
        if not all(isinstance(u, str) and u for u in tokens.values()):
            raise UserError("StaticTokenAuth: every user id must be a non-empty string")
        self._users: dict[bytes, str] = {_digest(t): u for t, u in tokens.items()}

    def __len__(self) -> int:
        """How many tokens the table holds."""
        return len(self._users)

    def __repr__(self) -> str:
        """``StaticTokenAuth(<n> tokens)``: never a token."""
        return f"StaticTokenAuth({len(self._users)} tokens)"

    async def __call__(self, token: str) -> str | None:
        """The user ``token`` stands for, or ``None``."""
        return self._users.get(_digest(token))


class JWTAuth:
    """Signed JSON Web Tokens: the user id is a claim of a token that passes every check.

    ``JWTAuth(key="…32+ bytes…", algorithms=["HS256"], audience="api")``.
    A token is refused (``None``, never an exception) when its signature,
    algorithm, ``exp``, ``nbf``, ``iat``, ``aud`` or ``iss`` does not check
    out, or when its user claim is missing, empty or not a string.

    Args:
        key: the verification key: an HMAC secret (``str``/``bytes``), a public
            key (PEM or a ``cryptography`` key object) or a ``jwt.PyJWK``.
        algorithms: the algorithms accepted; required, never ``"none"``.
            All must accept ``key`` (no mixing HMAC and public-key algorithms).
        audience: the required ``aud``; ``None`` refuses tokens that carry one.
        issuer: the required ``iss``, or ``None`` not to check it.
        user_claim: the claim holding the user id.
        leeway: seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
        require_exp: refuse tokens without ``exp`` (``exp`` is always checked
            when present).

    Raises:
        UserError: at construction, for no algorithms, ``"none"``, an unknown
            algorithm, or a key an algorithm refuses (too short an HMAC secret
            among them).
    """

    def __init__(self, key: AllowedPublicKeys | jwt.PyJWK | str | bytes,
                 algorithms: Sequence[str], *, audience: str | None = None,
                 issuer: str | None = None, user_claim: str = "sub", leeway: float = 0.0,
                 require_exp: bool = True) -> None:
        if isinstance(algorithms, str) or not algorithms:
            raise UserError('JWTAuth needs a non-empty list of algorithms, e.g. ["HS256"]')
        if any(alg.lower() == "none" for alg in algorithms):
            raise UserError('JWTAuth refuses the "none" algorithm: tokens must be signed')
        if not key:
            raise UserError("JWTAuth needs a key")
        if not user_claim:
            raise UserError("JWTAuth needs a user_claim, e.g. 'sub'")
        if not isinstance(key, jwt.PyJWK):
            for alg in algorithms:
                _check_key(key, alg)
        self._key = key
        self._algorithms = list(algorithms)
        self._audience = audience
        self._issuer = issuer
        self._user_claim = user_claim
        self._leeway = leeway
        self._require = ["exp"] if require_exp else []

    def __repr__(self) -> str:
        """The checks a token must pass (never the key)."""
        return (f"JWTAuth(algorithms={self._algorithms!r}, audience={self._audience!r}, "
                f"issuer={self._issuer!r}, user_claim={self._user_claim!r})")

    async def __call__(self, token: str) -> str | None:
        """The user claim of ``token`` when the token passes every check, else ``None``."""
        try:
            claims = jwt.decode(
                token, self._key, algorithms=self._algorithms, audience=self._audience,
                issuer=self._issuer, leeway=self._leeway,
                options={"require": self._require, "enforce_minimum_key_length": True})
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            logger.debug("JWT refused: %s", type(exc).__name__)
            return None
        user = claims.get(self._user_claim)
        return user if isinstance(user, str) and user else None


def _check_key(key: AllowedPublicKeys | str | bytes, alg: str) -> None:
    try:
        algorithm = jwt.get_algorithm_by_name(alg)
    except NotImplementedError:
        raise UserError(f"JWTAuth: unknown or unavailable algorithm {alg!r}") from None
    try:
        prepared = algorithm.prepare_key(key)
        too_short = algorithm.check_key_length(prepared)
    except (jwt.InvalidKeyError, ValueError, TypeError) as exc:
        raise UserError(f"JWTAuth: the key does not suit {alg}: {exc}") from None
    if too_short:
        raise UserError(f"JWTAuth: {too_short}")


def auth_from_settings(settings: Settings) -> Authenticator | None:
    """The authenticator the ``HEADWATER_AUTH_TOKENS`` / ``HEADWATER_JWT_*`` settings
    describe (what ``headwater serve`` gives an agent target), or ``None`` when none is set.

    Errors name the setting, never a token or a key.

    Raises:
        UserError: both static tokens and a JWT key; a malformed token list; a
            token file that cannot be read; a JWT key without algorithms (or
            algorithms without a key); a key the algorithms refuse.
    """
    tokens = settings.auth_tokens.get_secret_value() if settings.auth_tokens else ""
    key: str | bytes | None = settings.jwt_key.get_secret_value() if settings.jwt_key else None
    if key is not None and settings.jwt_key_file:
        raise UserError("set HEADWATER_JWT_KEY or HEADWATER_JWT_KEY_FILE, not both")
    if settings.jwt_key_file:
        key = _read_secret_file(settings.jwt_key_file, "HEADWATER_JWT_KEY_FILE")
    if tokens.strip() and key is not None:
        raise UserError("set HEADWATER_AUTH_TOKENS or HEADWATER_JWT_KEY(_FILE), not both: "
                        "a gateway takes one kind of token")
    if tokens.strip():
        return StaticTokenAuth(_token_table(tokens))
    if key is None:
        if settings.jwt_algorithms:
            raise UserError("HEADWATER_JWT_ALGORITHMS is set but no HEADWATER_JWT_KEY "
                            "(or HEADWATER_JWT_KEY_FILE)")
        return None
    algorithms = [a.strip() for a in (settings.jwt_algorithms or "").split(",") if a.strip()]
    if not algorithms:
        raise UserError("HEADWATER_JWT_KEY needs HEADWATER_JWT_ALGORITHMS, e.g. HS256 or "
                        "RS256,ES256")
    try:
        return JWTAuth(key, algorithms, audience=settings.jwt_audience,
                       issuer=settings.jwt_issuer, user_claim=settings.jwt_user_claim,
                       leeway=settings.jwt_leeway)
    except UserError as exc:
        raise UserError(f"HEADWATER_JWT_*: {exc}") from None


def _read_secret_file(path: str, name: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UserError(f"{name}: cannot read {path} ({why})") from None


def _token_table(text: str) -> dict[str, str]:
    """``token=user`` pairs (by commas or whitespace), or a file of them when ``text`` names
    one. A token may end in ``=`` (base64 padding): a pair splits at its last ``=``."""
    source = "HEADWATER_AUTH_TOKENS"
    stripped = text.strip()
    if os.path.isfile(stripped):
        source = f"HEADWATER_AUTH_TOKENS file {stripped}"
        lines = _read_secret_file(stripped, "HEADWATER_AUTH_TOKENS").splitlines()
        entries = [e for line in lines if not line.lstrip().startswith("#")
                   for e in line.replace(",", " ").split()]
    elif "=" not in stripped:  # never echoed: it may be a token
        raise UserError("HEADWATER_AUTH_TOKENS is neither token=user pairs nor the path of "
                        "a file of them")
    else:
        entries = stripped.replace(",", " ").split()
    table: dict[str, str] = {}
    for number, entry in enumerate(entries, 1):
        token, equals, user = entry.rpartition("=")
        if not equals or not token or not user:
            raise UserError(f"{source}: entry {number} is not token=user")
        if token in table:
            raise UserError(f"{source}: entry {number} repeats a token")
        table[token] = user
    if not table:
        raise UserError(f"{source}: no token=user entry")
    return table


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``.

    The scheme is case-insensitive; exactly one token must follow it.
    """
    if not authorization:
        return None
    parts = authorization.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1]


def _unauthorized(message: str, *, refused: bool) -> GatewayHTTPError:
    challenge = 'Bearer error="invalid_token"' if refused else "Bearer"
    return GatewayHTTPError("unauthorized", message, status=401,
                            headers={"WWW-Authenticate": challenge})


async def user_of(auth: Authenticator | None, authorization: str | None) -> str:
    """The user id a request's ``Authorization`` header proves.

    Args:
        auth: the authenticator, or ``None`` for dev mode.
        authorization: the ``Authorization`` header's value, if any.

    Returns:
        :data:`DEV_USER` in dev mode, else the authenticator's user id.

    Raises:
        GatewayHTTPError: ``unauthorized`` (401, ``WWW-Authenticate: Bearer``)
            for a missing or malformed header, and with
            ``error="invalid_token"`` for a token the authenticator refused,
            answered with an empty id, or raised on (logged, never sent).
    """
    if auth is None:
        return DEV_USER
    token = bearer_token(authorization)
    if token is None:
        raise _unauthorized("Missing or malformed bearer token.", refused=False)
    try:
        user = await auth(token)
    except Exception:
        logger.error("authenticator %r failed; answering 401", auth, exc_info=True)
        user = None
    if not isinstance(user, str) or not user:
        raise _unauthorized("Invalid token.", refused=True)
    return user


def user_dependency(auth: Authenticator | None) -> Callable[[HTTPConnection], Awaitable[str]]:
    """A FastAPI dependency answering the caller's user id (see :func:`user_of`).

    It also stores the id in ``scope["state"]["user"]``, where
    :class:`~headwater.gateway.limits.RequestLimits` logs it.
    ``Depends(user_dependency(auth))`` works on HTTP and WebSocket routes.
    """

    async def current_user(connection: HTTPConnection) -> str:
        user = await user_of(auth, connection.headers.get("authorization"))
        connection.scope.setdefault("state", {})["user"] = user
        return user

    return current_user


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine.

    True for ``localhost``, 127.0.0.0/8 and ``::1`` (bracketed or IPv4-mapped
    too); false for ``0.0.0.0``, ``::``, an empty host and every other name.
    """
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback
