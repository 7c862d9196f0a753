"""SCRAM credentials of users (Kafka's ``Admin.alterUserScramCredentials`` / ``describeUserScramCredentials``,
KIP-554). The password is salted and hashed here (PBKDF2, as Kafka's client does); only salt and salted password
travel. I/O: the calls run on the admin client's I/O thread."""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, LeastLoadedNodeProvider
from strom.admin.results import KeyedResult
from strom.common.errors import for_code
from strom.protocol.messages import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest
from strom.security.scram import SCRAM_MECHANISMS

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["ScramCredentialInfo", "UserScramCredentialUpsertion", "UserScramCredentialDeletion",
           "alter_user_scram_credentials", "describe_user_scram_credentials"]

_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_NAMES = {v: k for k, v in _CODES.items()}


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    user: str
    mechanism: str
    iterations: int
    password: str = field(repr=False)
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: str


def _code(mechanism: str) -> int:
    code = _CODES.get(mechanism.upper())
    if code is None:
        raise ValueError(f"Unknown SCRAM mechanism {mechanism!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    return code


def alter_user_scram_credentials(rt: AdminClientRunnable,
                                 alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
                                 timeout_ms: int | None) -> KeyedResult[str, None]:
    items = list(alterations)
    deletions, upsertions = [], []
    for a in items:
        if isinstance(a, UserScramCredentialDeletion):
            deletions.append(AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=a.user,
                                                                                      mechanism=_code(a.mechanism)))
        else:
            m = SCRAM_MECHANISMS.get(a.mechanism.upper())
            if m is None:
                raise ValueError(f"Unknown SCRAM mechanism {a.mechanism!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
            salt = a.salt if a.salt is not None else os.urandom(32)
            # An out-of-range iteration count is left for the broker to refuse (UNACCEPTABLE_CREDENTIAL).
            salted = m.salted_password(a.password, salt, max(1, a.iterations))
            upsertions.append(AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=a.user, mechanism=_code(a.mechanism), iterations=a.iterations, salt=salt,
                salted_password=salted))
    futures: FutureMap[str] = FutureMap(a.user for a in items)

    def request(_timeout: int) -> Any:
        return AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions)

    def response(body: Any, _version: int) -> None:
        for r in body.results:
            if r.error_code:
                futures.fail(r.user, for_code(r.error_code, r.error_message or None))
            else:
                futures.complete(r.user, None)
        futures.fail_missing([r.user for r in body.results], "user")

    rt.submit(Call("alterUserScramCredentials", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request,
                   response, futures.fail_all))
    return KeyedResult(futures.futures)


def describe_user_scram_credentials(rt: AdminClientRunnable, users: list[str] | None,
                                    timeout_ms: int | None) -> Future[dict[str, list[ScramCredentialInfo]]]:
    out: Future[dict[str, list[ScramCredentialInfo]]] = Future()

    def request(_timeout: int) -> Any:
        return DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequest.UserName(name=u) for u in users] if users else None)

    def response(body: Any, _version: int) -> None:
        if body.error_code:
            out.set_exception(for_code(body.error_code, body.error_message or None))
            return
        for r in body.results:
            if r.error_code:
                out.set_exception(for_code(r.error_code, f"{r.error_message} (user {r.user})"))
                return
        out.set_result({r.user: [ScramCredentialInfo(_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations)
                                 for c in r.credential_infos] for r in body.results})

    def fail(e: BaseException) -> None:
        if not out.done():
            out.set_exception(e)

    rt.submit(Call("describeUserScramCredentials", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(),
                   request, response, fail))
    return out
