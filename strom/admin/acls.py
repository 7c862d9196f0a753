"""Create, describe and delete ACLs (Kafka's ``Admin.createAcls`` / ``describeAcls`` / ``deleteAcls``).

Each call goes to the least loaded broker. ``create_acls`` gives one future per binding, ``delete_acls`` one per
filter (resolving to the bindings it removed), ``describe_acls`` one future of the matching bindings.
I/O: the calls run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, LeastLoadedNodeProvider
from strom.admin.results import KeyedResult
from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import for_code
from strom.protocol.messages import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["create_acls", "describe_acls", "delete_acls"]


def _binding(rt: int, name: str, pt: int, principal: str, host: str, op: int, perm: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType(rt), name, PatternType(pt)),
                      AccessControlEntry(principal, host, AclOperation(op), AclPermissionType(perm)))


def create_acls(rt: AdminClientRunnable, bindings: list[AclBinding],
                timeout_ms: int | None) -> KeyedResult[AclBinding, None]:
    futures: FutureMap[AclBinding] = FutureMap(bindings)
    unique = list(futures.futures)

    def request(_timeout: int) -> Any:
        return CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
            resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
            operation=int(b.entry.operation), permission_type=int(b.entry.permission_type)) for b in unique])

    def response(body: Any, _version: int) -> None:
        for b, r in zip(unique, body.results, strict=False):
            if r.error_code:
                futures.fail(b, for_code(r.error_code, r.error_message or None))
            else:
                futures.complete(b, None)
        futures.fail_missing([], "ACL creation")

    rt.submit(Call("createAcls", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   futures.fail_all))
    return KeyedResult(futures.futures)


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(f.pattern.resource_type), "resource_name_filter": f.pattern.name,
            "pattern_type_filter": int(f.pattern.pattern_type), "principal_filter": f.entry.principal,
            "host_filter": f.entry.host, "operation": int(f.entry.operation),
            "permission_type": int(f.entry.permission_type)}


def describe_acls(rt: AdminClientRunnable, flt: AclBindingFilter, timeout_ms: int | None) -> Future[list[AclBinding]]:
    out: Future[list[AclBinding]] = Future()

    def request(_timeout: int) -> Any:
        return DescribeAclsRequest(**_filter_fields(flt))

    def response(body: Any, _version: int) -> None:
        if body.error_code:
            out.set_exception(for_code(body.error_code, body.error_message or None))
            return
        out.set_result([_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                                 a.permission_type) for r in body.resources for a in r.acls])

    def fail(e: BaseException) -> None:
        if not out.done():
            out.set_exception(e)

    rt.submit(Call("describeAcls", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   fail, min_version=1))
    return out


def delete_acls(rt: AdminClientRunnable, filters: Iterable[AclBindingFilter],
                timeout_ms: int | None) -> KeyedResult[AclBindingFilter, list[AclBinding]]:
    futures: FutureMap[AclBindingFilter] = FutureMap(filters)
    unique = list(futures.futures)

    def request(_timeout: int) -> Any:
        return DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(**_filter_fields(f)) for f in unique])

    def response(body: Any, _version: int) -> None:
        for f, r in zip(unique, body.filter_results, strict=False):
            if r.error_code:
                futures.fail(f, for_code(r.error_code, r.error_message or None))
                continue
            futures.complete(f, [_binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                          m.operation, m.permission_type) for m in r.matching_acls])
        futures.fail_missing([], "ACL filter")

    rt.submit(Call("deleteAcls", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   futures.fail_all, min_version=1))
    return KeyedResult(futures.futures)
