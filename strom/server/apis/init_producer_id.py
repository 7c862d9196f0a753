"""InitProducerId (key 22): producer ids for idempotent producers.

Kafka counterpart: ``TransactionCoordinator.handleInitProducerId`` with a ``ProducerIdManager``. Transactions
(AddPartitionsToTxn, EndTxn, ...) are not offered by this broker yet, so a transactional id is refused at once
with a clear message instead of letting the client's transaction hang until its records time out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.producer_id_manager import ProducerIdManager
    from strom.server.request_context import RequestContext


@api(ApiKey.INIT_PRODUCER_ID, 0)
async def handle(ctx: RequestContext, request: InitProducerIdRequest, *,
                 producer_ids: ProducerIdManager) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, producer_id=-1,
                                      producer_epoch=-1)
    try:
        pid = await producer_ids.generate_producer_id()
    except OSError:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.KAFKA_STORAGE_ERROR, producer_id=-1,
                                      producer_epoch=-1)
    except Exception:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)
