"""ACL management (CreateAcls 30, DescribeAcls 29, DeleteAcls 31), SCRAM users (AlterUserScramCredentials 51,
DescribeUserScramCredentials 50, KIP-554) and the SASL APIs' place in the registry.

Kafka counterpart: ``KafkaApis.handleCreateAcls`` / ``handleDescribeAcls`` / ``handleDeleteAcls`` (through the
authorizer: SECURITY_DISABLED without one) and ``handleSaslHandshakeRequest`` / ``handleSaslAuthenticateRequest``:
on a SASL listener the socket server's authenticator answers these before any request reaches the dispatcher, so
one that arrives here (a PLAINTEXT or SSL listener, or a second handshake after authentication) is answered
ILLEGAL_SASL_STATE, as Kafka does. Listing them here puts them in ApiVersions, which SASL clients require.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from strom.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from strom.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from strom.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from strom.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.server.apis import api
from strom.server.security.acl_handlers import handle_create_acls, handle_delete_acls, handle_describe_acls
from strom.server.security.scram_handlers import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext


@api(ApiKey.CREATE_ACLS, 1)
async def create_acls(ctx: RequestContext, request: CreateAclsRequest, *, authorizer: Any) -> CreateAclsResponse:
    return handle_create_acls(authorizer, ctx.connection.principal, ctx.connection.client_host, request,
                              ctx.api_version)


@api(ApiKey.DESCRIBE_ACLS, 1)
async def describe_acls(ctx: RequestContext, request: DescribeAclsRequest, *, authorizer: Any,
                        ) -> DescribeAclsResponse:
    return handle_describe_acls(authorizer, ctx.connection.principal, ctx.connection.client_host, request,
                                ctx.api_version)


@api(ApiKey.DELETE_ACLS, 1)
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest, *, authorizer: Any) -> DeleteAclsResponse:
    return handle_delete_acls(authorizer, ctx.connection.principal, ctx.connection.client_host, request,
                              ctx.api_version)


@api(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


@api(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="Unexpected SASL request on this listener or connection",
                                    auth_bytes=b"", session_lifetime_ms=0)


@api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: AlterUserScramCredentialsRequest, *,
                                       credentials: Any, authorizer: Any) -> AlterUserScramCredentialsResponse:
    return handle_alter_user_scram_credentials(credentials, authorizer, ctx.connection.principal,
                                               ctx.connection.client_host, request)


@api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request: DescribeUserScramCredentialsRequest, *,
                                          credentials: Any, authorizer: Any) -> DescribeUserScramCredentialsResponse:
    return handle_describe_user_scram_credentials(credentials, authorizer, ctx.connection.principal,
                                                  ctx.connection.client_host, request)
