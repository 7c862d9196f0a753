"""The client half of SASL (Kafka's ``SaslClientAuthenticator``), sans-I/O over the shared framing core.

After TCP (and TLS) is up and before the channel is ready: SaslHandshake v1 naming the mechanism, then
SaslAuthenticate v1 carrying each token until the mechanism completes. ``next_send()`` gives the bytes to
write, ``receive(frame)`` consumes a response frame; a refusal raises :class:`SaslAuthenticationError` with the
broker's message. Not thread-safe: owned by one channel on the I/O thread.
"""

from __future__ import annotations

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import KafkaConnection
from strom.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from strom.security.sasl import SaslAuthenticationError, SaslClient

__all__ = ["SaslClientAuthenticator"]

_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 1


class SaslClientAuthenticator:
    def __init__(self, mechanism: SaslClient, client_id: str | None = None, node: object = None) -> None:
        self._mechanism = mechanism
        self._conn = KafkaConnection("client", client_id=client_id)
        self._node = node
        self._pending: bytes | None = self._conn.send_request(
            ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION, SaslHandshakeRequest(mechanism=mechanism.mechanism))[1]
        self._sent_initial = False
        self.complete = False
        self.session_lifetime_ms = 0

    def next_send(self) -> bytes | None:
        data, self._pending = self._pending, None
        return data

    def receive(self, frame: memoryview) -> None:
        _cid, api_key, _version, response = self._conn.receive_frame(frame)
        if api_key == ApiKey.SASL_HANDSHAKE:
            if response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
                raise SaslAuthenticationError(
                    f"Client SASL mechanism '{self._mechanism.mechanism}' not enabled in the server, enabled "
                    f"mechanisms are {response.mechanisms}")
            if response.error_code != ErrorCode.NONE:
                raise SaslAuthenticationError(f"SaslHandshake failed with error code {response.error_code}")
            self._send_token(self._mechanism.initial_response())
            return
        if response.error_code != ErrorCode.NONE:
            message = response.error_message or f"error code {response.error_code}"
            raise SaslAuthenticationError(f"Authentication failed with node {self._node}: {message}")
        self.session_lifetime_ms = int(getattr(response, "session_lifetime_ms", 0) or 0)
        token = self._mechanism.evaluate(bytes(response.auth_bytes))
        if token is not None:
            self._send_token(token)
        elif self._mechanism.complete:
            self.complete = True
        else:
            raise SaslAuthenticationError("SASL exchange ended before the mechanism completed")

    def _send_token(self, token: bytes) -> None:
        self._pending = self._conn.send_request(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION,
                                                SaslAuthenticateRequest(auth_bytes=token))[1]
