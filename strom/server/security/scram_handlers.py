"""AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554) as functions of a credential store.

The client sends salt and salted password (PBKDF2 done client-side, never the password); the broker keeps
stored key and server key. Checks and errors are Kafka's: ALTER / DESCRIBE on the cluster, one result per user,
UNACCEPTABLE_CREDENTIAL (empty user, iterations outside 4096-16384), UNSUPPORTED_SASL_MECHANISM,
DUPLICATE_RESOURCE (a user altered twice for one mechanism), RESOURCE_NOT_FOUND (deleting or describing a
credential that does not exist).
"""

from __future__ import annotations

from typing import Any

from strom.common.acl import AclOperation
from strom.common.error_codes import ErrorCode
from strom.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from strom.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS, ScramCredential
from strom.server.security.acl_handlers import CLUSTER_RESOURCE
from strom.server.security.authorizer import Authorizer
from strom.server.security.credentials import CredentialStore
from strom.server.security.principal import KafkaPrincipal

__all__ = ["handle_alter_user_scram_credentials", "handle_describe_user_scram_credentials", "MECHANISM_CODES"]

MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_CODE_OF = {v: k for k, v in MECHANISM_CODES.items()}


def handle_alter_user_scram_credentials(store: CredentialStore, authorizer: Authorizer | None,
                                        principal: KafkaPrincipal, host: str,
                                        request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))

    def result(user: str, code: int, message: str | None = None) -> Any:
        return AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
            user=user, error_code=code, error_message=message)

    if authorizer is not None and not authorizer.authorize(principal, host, AclOperation.ALTER, CLUSTER_RESOURCE):
        return AlterUserScramCredentialsResponse(results=[
            result(u, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.") for u in users])
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    for item in [*request.deletions, *request.upsertions]:
        key = (item.name, item.mechanism)
        if key in seen:
            errors.setdefault(item.name, (ErrorCode.DUPLICATE_RESOURCE,
                                          "A user credential cannot be altered twice in the same request"))
        seen.add(key)
        if not item.name:
            errors.setdefault(item.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
        if item.mechanism not in MECHANISM_CODES:
            errors.setdefault(item.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
    for u in request.upsertions:
        if u.name in errors:
            continue
        if u.iterations < MIN_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    for d in request.deletions:
        if d.name not in errors and store.credential(d.name, MECHANISM_CODES[d.mechanism]) is None:
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    # A user's changes are applied only when all of them are valid (Kafka answers per user).
    for d in request.deletions:
        if d.name not in errors:
            store.delete(d.name, MECHANISM_CODES[d.mechanism])
    for u in request.upsertions:
        if u.name not in errors:
            m = SCRAM_MECHANISMS[MECHANISM_CODES[u.mechanism]]
            salted = bytes(u.salted_password)
            store.upsert(u.name, m.name, ScramCredential(bytes(u.salt), m.hash(m.client_key(salted)),
                                                         m.server_key(salted), u.iterations))
    return AlterUserScramCredentialsResponse(results=[
        result(u, *errors[u]) if u in errors else result(u, ErrorCode.NONE) for u in users])


def handle_describe_user_scram_credentials(
        store: CredentialStore, authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
        request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    R = DescribeUserScramCredentialsResponse
    if authorizer is not None and not authorizer.authorize(principal, host, AclOperation.DESCRIBE, CLUSTER_RESOURCE):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                 results=[])
    described = store.describe()
    wanted = [u.name for u in request.users] if request.users else sorted(described)
    results = []
    counts: dict[str, int] = {}
    for name in wanted:
        counts[name] = counts.get(name, 0) + 1
    for name in dict.fromkeys(wanted):
        if counts[name] > 1:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, error_message="Cannot describe SCRAM "
                "credentials for the same user twice in a single request", credential_infos=[]))
        elif name not in described:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message="Attempt to describe a user credential that does not exist", credential_infos=[]))
        else:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[
                    R.CredentialInfo(mechanism=_CODE_OF[m], iterations=i) for m, i in sorted(described[name].items())]))
    return R(error_code=ErrorCode.NONE, error_message=None, results=results)
