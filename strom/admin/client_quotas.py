"""Client quotas (Kafka's ``Admin.alterClientQuotas`` / ``describeClientQuotas``, KIP-546).

An entity is a mapping of entity type (``user``, ``client-id``) to a name, ``None`` naming the type's default:
``ClientQuotaEntity({"user": "alice", "client-id": None})`` is ``/config/users/alice/clients/<default>``. Values
are floats, as on the wire (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``). I/O: the calls
run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, LeastLoadedNodeProvider
from strom.admin.results import KeyedResult
from strom.common.errors import for_code
from strom.protocol.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["ClientQuotaEntity", "ClientQuotaAlteration", "ClientQuotaFilter", "ClientQuotaFilterComponent",
           "alter_client_quotas", "describe_client_quotas"]


class ClientQuotaEntity:
    """Kafka's ``ClientQuotaEntity``: entity type → name (``None``: the default entity). Hashable, immutable."""

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"

    __slots__ = ("_entries", "_key")

    def __init__(self, entries: Mapping[str, str | None]) -> None:
        self._entries = dict(entries)
        self._key = frozenset(self._entries.items())

    def entries(self) -> dict[str, str | None]:
        return dict(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotaEntity) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({self._entries!r})"


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """Kafka's ``ClientQuotaAlteration``: set (a value) or remove (``None``) quota keys of one entity."""

    entity: ClientQuotaEntity
    ops: list[ClientQuotaAlteration.Op] = field(default_factory=list)

    @dataclass(frozen=True)
    class Op:
        key: str
        value: float | None  # None: remove the key


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """Kafka's ``ClientQuotaFilterComponent``: ``of_entity`` (that name), ``of_default_entity`` (the default),
    ``of_entity_type`` (any name of the type)."""

    entity_type: str
    match: str | None
    match_type: int  # 0 exact, 1 default, 2 any specified

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, name, 0)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 1)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, None, 2)


@dataclass(frozen=True)
class ClientQuotaFilter:
    """Kafka's ``ClientQuotaFilter``: ``contains`` (entities may have other types too), ``contains_only``
    (strict: no other types), ``all``."""

    components: tuple[ClientQuotaFilterComponent, ...]
    strict: bool

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)


def alter_client_quotas(rt: AdminClientRunnable, alterations: Iterable[ClientQuotaAlteration], validate_only: bool,
                        timeout_ms: int | None) -> KeyedResult[ClientQuotaEntity, None]:
    items = list(alterations)
    for a in items:
        if not isinstance(a, ClientQuotaAlteration):
            raise TypeError(f"expected ClientQuotaAlteration, not {type(a).__name__}")
        for op in a.ops:
            if op.value is not None and not isinstance(op.value, int | float):
                raise TypeError(f"quota {op.key} must be a number or None, not {op.value!r}")
    futures: FutureMap[ClientQuotaEntity] = FutureMap(a.entity for a in items)

    def request(_timeout: int) -> Any:
        return AlterClientQuotasRequest(validate_only=validate_only, entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n)
                        for t, n in a.entity.entries().items()],
                ops=[AlterClientQuotasRequest.OpData(key=op.key, value=float(op.value or 0.0),
                                                     remove=op.value is None) for op in a.ops])
            for a in items])

    def response(body: Any, _version: int) -> None:
        seen = []
        for r in body.entries:
            entity = ClientQuotaEntity({e.entity_type: e.entity_name for e in r.entity})
            seen.append(entity)
            if r.error_code:
                futures.fail(entity, for_code(r.error_code, r.error_message or None))
            else:
                futures.complete(entity, None)
        futures.fail_missing(seen, "quota entity")

    rt.submit(Call("alterClientQuotas", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   futures.fail_all))
    return KeyedResult(futures.futures)


def describe_client_quotas(rt: AdminClientRunnable, quota_filter: ClientQuotaFilter, timeout_ms: int | None,
                           ) -> Future[dict[ClientQuotaEntity, dict[str, float]]]:
    out: Future[dict[ClientQuotaEntity, dict[str, float]]] = Future()

    def request(_timeout: int) -> Any:
        return DescribeClientQuotasRequest(strict=quota_filter.strict, components=[
            DescribeClientQuotasRequest.ComponentData(entity_type=c.entity_type, match_type=c.match_type,
                                                      match=c.match) for c in quota_filter.components])

    def response(body: Any, _version: int) -> None:
        if body.error_code:
            out.set_exception(for_code(body.error_code, body.error_message or None))
            return
        out.set_result({ClientQuotaEntity({e.entity_type: e.entity_name for e in entry.entity}):
                        {v.key: v.value for v in entry.values} for entry in body.entries or []})

    def fail(e: BaseException) -> None:
        if not out.done():
            out.set_exception(e)

    rt.submit(Call("describeClientQuotas", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request,
                   response, fail))
    return out
