"""CreateAcls / DescribeAcls / DeleteAcls request handling (Kafka's ``AclApis``), as functions of the authorizer.

The broker's dispatcher calls these with the connection's principal and host; they check the cluster permission
Kafka checks (ALTER on the cluster to create or delete ACLs, DESCRIBE to list them), validate every binding and
answer with Kafka's error codes. Without an authorizer every request gets SECURITY_DISABLED, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from strom.common.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from strom.common.error_codes import ErrorCode
from strom.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from strom.server.security.authorizer import Authorizer
from strom.server.security.principal import KafkaPrincipal

__all__ = ["handle_create_acls", "handle_describe_acls", "handle_delete_acls", "CLUSTER_RESOURCE"]

CLUSTER_RESOURCE = (ResourceType.CLUSTER, "kafka-cluster")
_NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(cls: Any, code: int) -> Any:
    try:
        return cls(code)
    except ValueError:
        return cls.UNKNOWN


def _binding(c: Any, version: int) -> AclBinding:
    """One AclCreation → binding; ``ValueError`` with Kafka's wording when it is not a valid ACL."""
    rt = _enum(ResourceType, c.resource_type)
    pt = _enum(PatternType, c.resource_pattern_type) if version >= 1 else PatternType.LITERAL
    op = _enum(AclOperation, c.operation)
    perm = _enum(AclPermissionType, c.permission_type)
    for what, value, bad in (("resource type", rt, (ResourceType.ANY, ResourceType.UNKNOWN)),
                             ("pattern type", pt, (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN)),
                             ("operation", op, (AclOperation.ANY, AclOperation.UNKNOWN)),
                             ("permission type", perm, (AclPermissionType.ANY, AclPermissionType.UNKNOWN))):
        if value in bad:
            raise ValueError(f"Invalid ACL creation: {what} {value.name} is not allowed")
    try:
        KafkaPrincipal.parse(c.principal)
    except ValueError:
        raise ValueError(f"Invalid ACL creation: principal {c.principal!r} is not type:name") from None
    if not c.host:
        raise ValueError("Invalid ACL creation: host must not be empty (use * for any host)")
    return AclBinding(ResourcePattern(rt, c.resource_name, pt), AccessControlEntry(c.principal, c.host, op, perm))


def _filter(f: Any, version: int) -> AclBindingFilter:
    pt = _enum(PatternType, f.pattern_type_filter) if version >= 1 else PatternType.LITERAL
    return AclBindingFilter(
        ResourcePatternFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter, pt),
        AccessControlEntryFilter(f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                                 _enum(AclPermissionType, f.permission_type)))


def handle_create_acls(authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
                       request: CreateAclsRequest, version: int) -> CreateAclsResponse:
    def result(code: int, message: str | None = None) -> Any:
        return CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)

    if authorizer is None:
        return CreateAclsResponse(results=[result(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
                                           for _ in request.creations])
    if not authorizer.authorize(principal, host, AclOperation.ALTER, CLUSTER_RESOURCE):
        return CreateAclsResponse(results=[result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  "Cluster authorization failed.") for _ in request.creations])
    results: list[Any] = [None] * len(request.creations)
    valid: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(request.creations):
        try:
            valid.append((i, _binding(c, version)))
        except ValueError as e:
            results[i] = result(ErrorCode.INVALID_REQUEST, str(e))
    outcomes = authorizer.create_acls([b for _, b in valid])
    for (i, _b), error in zip(valid, outcomes, strict=True):
        results[i] = result(ErrorCode.NONE) if error is None else result(ErrorCode.INVALID_REQUEST, str(error))
    return CreateAclsResponse(results=results)


def handle_describe_acls(authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
                         request: DescribeAclsRequest, version: int) -> DescribeAclsResponse:
    if authorizer is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=_NO_AUTHORIZER,
                                    resources=[])
    if not authorizer.authorize(principal, host, AclOperation.DESCRIBE, CLUSTER_RESOURCE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message="Cluster authorization failed.", resources=[])
    flt = _filter(request, version)
    problem = flt.unknown_element()
    if problem is not None:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[])
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in authorizer.acls(flt):
        grouped.setdefault(b.pattern, []).append(b.entry)
    resources = [DescribeAclsResponse.DescribeAclsResource(
        resource_type=int(p.resource_type), resource_name=p.name, pattern_type=int(p.pattern_type),
        acls=[DescribeAclsResponse.AclDescription(principal=e.principal, host=e.host, operation=int(e.operation),
                                                  permission_type=int(e.permission_type)) for e in entries])
        for p, entries in grouped.items() if version >= 1 or p.pattern_type is PatternType.LITERAL]
    return DescribeAclsResponse(error_code=ErrorCode.NONE, error_message=None, resources=resources)


def handle_delete_acls(authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
                       request: DeleteAclsRequest, version: int) -> DeleteAclsResponse:
    def failed(code: int, message: str) -> Any:
        return DeleteAclsResponse.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])

    if authorizer is None:
        return DeleteAclsResponse(filter_results=[failed(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
                                                  for _ in request.filters])
    if not authorizer.authorize(principal, host, AclOperation.ALTER, CLUSTER_RESOURCE):
        return DeleteAclsResponse(filter_results=[failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                         "Cluster authorization failed.") for _ in request.filters])
    out: list[Any] = [None] * len(request.filters)
    usable: list[tuple[int, AclBindingFilter]] = []
    for i, f in enumerate(request.filters):
        flt = _filter(f, version)
        problem = flt.unknown_element()
        if problem is not None:
            out[i] = failed(ErrorCode.INVALID_REQUEST, problem)
        else:
            usable.append((i, flt))
    removed = authorizer.delete_acls([f for _, f in usable])
    for (i, _f), bindings in zip(usable, removed, strict=True):
        out[i] = DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
            DeleteAclsResponse.DeleteAclsMatchingAcl(
                error_code=ErrorCode.NONE, error_message=None, resource_type=int(b.pattern.resource_type),
                resource_name=b.pattern.name, pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                host=b.entry.host, operation=int(b.entry.operation), permission_type=int(b.entry.permission_type))
            for b in bindings])
    return DeleteAclsResponse(filter_results=out)
