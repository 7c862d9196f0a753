"""The broker's SASL authenticator (Kafka's ``SaslServerAuthenticator``, KIP-152 and KIP-368), sans-I/O.

It sees every frame of a SASL_PLAINTEXT / SASL_SSL connection before the dispatcher does:

* before authentication: ApiVersions goes to the dispatcher; SaslHandshake picks a mechanism from
  ``sasl.enabled.mechanisms`` (v0: the tokens that follow are raw frames; v1: they come in SaslAuthenticate);
  anything else closes the connection (a SaslAuthenticate first gets an ILLEGAL_SASL_STATE answer);
* a failed authentication gets SASL_AUTHENTICATION_FAILED with a clear message, then the connection closes;
  the log line names the client address and the reason, never a password;
* once authenticated, ``ctx.principal`` is ``User:<name>`` and frames go to the dispatcher; with
  ``connections.max.reauth.ms`` the session lasts that long (SaslAuthenticate v1 tells the client), a client may
  re-authenticate (same principal) with a new SaslHandshake, and any other request after expiry closes the
  connection.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import ConfigError, ProtocolError
from strom.common.time import SYSTEM_TIME, Time
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import KafkaConnection
from strom.protocol.headers import RequestHeader, decode_request_header
from strom.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from strom.security.jaas import parse_jaas_config
from strom.security.plain import PlainServer, constant_time_equals
from strom.security.sasl import SUPPORTED_MECHANISMS, SaslAuthenticationError, SaslServer
from strom.security.scram import SCRAM_MECHANISMS, ScramServer
from strom.server.broker_config import BrokerConfig
from strom.server.security.credentials import CREDENTIALS_FILE, CredentialStore, FileCredentialStore
from strom.server.security.principal import KafkaPrincipal
from strom.server.socket_server import ConnectionContext

__all__ = ["SaslServerAuthenticator", "SaslServerSettings", "authenticator_factory", "enabled_mechanisms"]

log = logging.getLogger("strom.server.security")
_SERVER = KafkaConnection("server")
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = 1
    AUTHENTICATE = 2
    COMPLETE = 3
    FAILED = 4


def enabled_mechanisms(config: BrokerConfig, listener_name: str) -> list[str]:
    raw = str(config.listener_value(listener_name, "sasl.enabled.mechanisms") or "")
    mechanisms = [m.strip().upper() for m in raw.split(",") if m.strip()]
    if not mechanisms:
        raise ConfigError(f"Invalid value for configuration sasl.enabled.mechanisms: listener {listener_name} "
                          "uses SASL but no mechanism is enabled")
    for m in mechanisms:
        if m not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"Invalid value {m} for configuration sasl.enabled.mechanisms (listener "
                              f"{listener_name}): strom supports {', '.join(SUPPORTED_MECHANISMS)}")
    return mechanisms


class SaslServerSettings:
    """What the authenticators of one listener share: mechanisms, PLAIN users, the SCRAM credential store."""

    def __init__(self, mechanisms: list[str], plain_users: dict[str, str], credentials: CredentialStore | None,
                 reauth_ms: int) -> None:
        self.mechanisms = mechanisms
        self._plain_users = plain_users
        self.credentials = credentials
        self.reauth_ms = reauth_ms

    def check_plain(self, username: str, password: str) -> bool:
        expected = self._plain_users.get(username)
        # compare even for unknown users, so the time taken does not tell which users exist
        return constant_time_equals(expected if expected is not None else "\0" * len(password), password) \
            and expected is not None

    def new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self.check_plain)
        store = self.credentials
        return ScramServer(SCRAM_MECHANISMS[mechanism],
                           lambda user: store.credential(user, mechanism) if store is not None else None)


def _plain_users(config: BrokerConfig, listener_name: str) -> dict[str, str]:
    prefixed = f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config"
    key = prefixed if prefixed in config.originals else "sasl.jaas.config"
    text = config.originals.get(key)
    if not text:
        raise ConfigError(f"Missing configuration {prefixed}: SASL/PLAIN on listener {listener_name} needs "
                          "'org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>=\"<password>\";'")
    entry = parse_jaas_config(text, key)
    users = {k[5:]: v for k, v in entry.options.items() if k.startswith("user_")}
    if not users:
        raise ConfigError(f"Invalid value for configuration {key}: no user_<name>=\"<password>\" option, so no "
                          "client could authenticate with PLAIN")
    return users


def authenticator_factory(config: BrokerConfig, listener_name: str, *, time: Time = SYSTEM_TIME,
                          data_dir: str | Path | None = None,
                          credentials: CredentialStore | None = None) -> Callable[[], SaslServerAuthenticator]:
    """Validate the listener's SASL settings now (bad config fails the broker start, not the first client)
    and return a factory of per-connection authenticators."""
    mechanisms = enabled_mechanisms(config, listener_name)
    plain = _plain_users(config, listener_name) if "PLAIN" in mechanisms else {}
    if credentials is None and any(m in SCRAM_MECHANISMS for m in mechanisms):
        base = Path(data_dir) if data_dir is not None else Path(config.log_dirs[0])
        credentials = FileCredentialStore(base / CREDENTIALS_FILE)
    settings = SaslServerSettings(mechanisms, plain, credentials, int(config["connections.max.reauth.ms"]))
    return lambda: SaslServerAuthenticator(settings, time)


class SaslServerAuthenticator:
    """One connection's SASL state. Event loop only."""

    def __init__(self, settings: SaslServerSettings, time: Time = SYSTEM_TIME) -> None:
        self._settings = settings
        self._time = time
        self._state = _State.HANDSHAKE_OR_VERSIONS
        self._server: SaslServer | None = None
        self._handshake_version = 1
        self._session_expires_ms: int | None = None
        self._reauthenticating = False

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def handle(self, ctx: ConnectionContext, frame: memoryview, now_ms: int) -> tuple[bytes | None, bool, bool]:
        if self._state is _State.AUTHENTICATE and self._handshake_version == 0:
            return self._raw_token(ctx, frame, now_ms)  # SaslHandshake v0: the token is the whole frame
        try:
            header, offset = decode_request_header(frame)
        except ProtocolError as e:
            log.info("closing connection %s: unreadable request header during SASL authentication (%s)", ctx.peer, e)
            return None, False, True
        key = header.api_key
        if self._state is _State.COMPLETE:
            if key == _SASL_HANDSHAKE:
                self._reauthenticating = True
                self._state = _State.HANDSHAKE_OR_VERSIONS
            elif self._session_expires_ms is not None and now_ms > self._session_expires_ms:
                log.info("closing connection %s: SASL session of %s expired (connections.max.reauth.ms) and the "
                         "client did not re-authenticate", ctx.peer, ctx.principal)
                return None, False, True
            else:
                return None, True, False
        if self._state is _State.HANDSHAKE_OR_VERSIONS:
            if key == _API_VERSIONS and not self._reauthenticating:
                return None, True, False
            if key == _SASL_HANDSHAKE:
                return self._handshake(ctx, header, frame[offset:])
            return self._illegal(ctx, header, "during SASL handshake")
        if self._state is _State.AUTHENTICATE:
            if key == _SASL_AUTHENTICATE:
                return self._authenticate(ctx, header, frame[offset:], now_ms)
            return self._illegal(ctx, header, "during SASL authentication")
        return None, False, True

    def _illegal(self, ctx: ConnectionContext, header: RequestHeader, when: str) -> tuple[bytes | None, bool, bool]:
        self._state = _State.FAILED
        message = f"Unexpected Kafka request of type {_api_name(header.api_key)} {when}."
        log.info("closing connection %s on listener %s: %s", ctx.peer, ctx.listener_name, message)
        if header.api_key == _SASL_AUTHENTICATE:
            response = SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=message)
            return _encode(header, response), False, True
        return None, False, True

    def _handshake(self, ctx: ConnectionContext, header: RequestHeader,
                   body: memoryview) -> tuple[bytes | None, bool, bool]:
        try:
            request = SaslHandshakeRequest.decode(body, header.api_version)
        except ProtocolError:
            log.info("closing connection %s: malformed SaslHandshake request", ctx.peer)
            return None, False, True
        mechanism = str(request.mechanism)
        mechanisms = self._settings.mechanisms
        if mechanism not in mechanisms or (self._reauthenticating and mechanism != ctx.sasl_mechanism):
            self._state = _State.FAILED
            log.info("closing connection %s: client asked for SASL mechanism %r, enabled: %s", ctx.peer,
                     mechanism, ",".join(mechanisms))
            response = SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
            return _encode(header, response), False, True
        self._server = self._settings.new_server(mechanism)
        self._handshake_version = header.api_version
        self._state = _State.AUTHENTICATE
        ctx.sasl_mechanism = mechanism
        return _encode(header, SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)), False, False

    def _evaluate(self, ctx: ConnectionContext, token: bytes, now_ms: int) -> tuple[bytes, str | None]:
        """The mechanism's answer and, on failure, the error message."""
        assert self._server is not None
        try:
            challenge = self._server.evaluate(token)
        except SaslAuthenticationError as e:
            self._state = _State.FAILED
            log.info("Failed authentication with %s (listener %s, %s): %s", ctx.client_host, ctx.listener_name,
                     self._server.mechanism, e)
            return b"", str(e)
        if self._server.complete:
            principal = KafkaPrincipal(KafkaPrincipal.USER_TYPE, self._server.authorization_id or "")
            if self._reauthenticating and principal != ctx.principal:
                self._state = _State.FAILED
                message = f"Cannot change principals during re-authentication from {ctx.principal}: {principal}"
                log.info("Failed re-authentication with %s: %s", ctx.client_host, message)
                return b"", message
            ctx.principal = principal
            self._state = _State.COMPLETE
            self._reauthenticating = False
            reauth = self._settings.reauth_ms
            self._session_expires_ms = now_ms + reauth if reauth > 0 else None
            log.debug("authenticated %s as %s with %s", ctx.peer, principal, self._server.mechanism)
        return challenge, None

    def _authenticate(self, ctx: ConnectionContext, header: RequestHeader, body: memoryview,
                      now_ms: int) -> tuple[bytes | None, bool, bool]:
        try:
            request = SaslAuthenticateRequest.decode(body, header.api_version)
        except ProtocolError:
            log.info("closing connection %s: malformed SaslAuthenticate request", ctx.peer)
            return None, False, True
        challenge, error = self._evaluate(ctx, bytes(request.auth_bytes), now_ms)
        if error is not None:
            response = SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=error)
            return _encode(header, response), False, True
        lifetime = self._settings.reauth_ms if self._state is _State.COMPLETE else 0
        response = SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge,
                                            session_lifetime_ms=lifetime)
        return _encode(header, response), False, False

    def _raw_token(self, ctx: ConnectionContext, frame: memoryview, now_ms: int) -> tuple[bytes | None, bool, bool]:
        challenge, error = self._evaluate(ctx, bytes(frame), now_ms)
        if error is not None:
            return None, False, True  # v0 has no way to carry an error: Kafka closes the connection
        # Even an empty answer is sent (4 zero bytes): v0 clients (kafka-python) wait for it.
        return len(challenge).to_bytes(4, "big") + challenge, False, False


def _encode(header: RequestHeader, response: Any) -> bytes:
    return _SERVER.encode_response(header, response)


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api key {key}"
