"""InitProducerId (key 22): hand out producer ids for idempotent producers.

Kafka counterpart: ``TransactionCoordinator.handleInitProducerId`` with a ``ProducerIdManager`` that reserves
ids in blocks. Ids survive restarts because each block's end is stored durably before ids from it are given
out. A transactional id keeps its producer id and gets its epoch bumped on every init (transactions proper —
AddPartitionsToTxn, EndTxn — are not offered by this broker yet, so transactional clients stop there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer
    from strom.server.request_context import RequestContext

BLOCK_SIZE = 1000
INVALID_TRANSACTION_TIMEOUT = 50
MAX_TRANSACTION_TIMEOUT_MS = 900_000
MAX_EPOCH = 32767


class ProducerIdManager:
    def __init__(self, broker: BrokerServer) -> None:
        self.broker = broker
        self._next = 0
        self._end = 0
        self.transactional: dict[str, tuple[int, int]] = {}

    def next_id(self) -> int:
        md = self.broker.metadata
        assert md is not None
        if self._next >= self._end:
            self._next = md.allocate_producer_id_block(BLOCK_SIZE)
            self._end = self._next + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid


def _manager(broker: BrokerServer) -> ProducerIdManager:
    mgr = getattr(broker, "producer_id_manager", None)
    if mgr is None:
        mgr = ProducerIdManager(broker)
        broker.producer_id_manager = mgr  # type: ignore[attr-defined]
    return mgr


@api(ApiKey.INIT_PRODUCER_ID, 0)
async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    mgr = _manager(ctx.broker)
    tid = request.transactional_id
    if tid is None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=mgr.next_id(), producer_epoch=0)
    if not 0 < request.transaction_timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
        return InitProducerIdResponse(error_code=INVALID_TRANSACTION_TIMEOUT, producer_id=-1, producer_epoch=-1)
    pid, epoch = mgr.transactional.get(tid, (-1, -1))
    if pid < 0 or epoch >= MAX_EPOCH - 1:
        pid, epoch = mgr.next_id(), 0
    else:
        epoch += 1
    mgr.transactional[tid] = (pid, epoch)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch)
