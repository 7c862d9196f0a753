"""``make demo``: start an embedded strom broker, write a sample and read it back.

Runs a real broker subprocess on a free loopback port with a temporary data dir, creates a topic with three
partitions, produces a small clickstream sample and consumes it back, printing what was stored where, then stops
the broker cleanly. (The PySpark pipeline takes this place once ``strom.spark`` lands.)
"""

from __future__ import annotations

import json
import sys
import time

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.records import MemoryRecords
from strom.testing.broker_process import BrokerProcess
from strom.testing.raw_client import RawClient

PAGES = ["/home", "/search", "/cart", "/checkout"]


def main() -> int:
    print("strom demo: starting an embedded broker ...", flush=True)
    with BrokerProcess() as broker:
        print(f"broker ready on {broker.bootstrap} (data in {broker.data_dir})", flush=True)
        with RawClient(broker.bootstrap, client_id="strom-demo") as c:
            resp = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="clicks", num_partitions=3, replication_factor=1)], timeout_ms=10_000))
            assert resp.topics[0].error_code == 0, resp
            now = int(time.time() * 1000)
            for p in range(3):
                b = MemoryRecordsBuilder()
                for i in range(4):
                    event = {"user": f"user-{p}", "page": PAGES[(p + i) % 4], "ts": now + i}
                    b.append(now + i, f"user-{p}".encode(), json.dumps(event).encode())
                req = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
                    name="clicks", partition_data=[ProduceRequest.PartitionProduceData(index=p, records=b.build())])])
                pr = c.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
                print(f"produced 4 events to clicks-{p} at base offset {pr.base_offset}", flush=True)
            fetch = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                topic="clicks", partitions=[FetchRequest.FetchPartition(partition=p, fetch_offset=0,
                                                                        partition_max_bytes=1 << 20)
                                            for p in range(3)])])
            print(f"\n{'partition':>9} {'offset':>6}  {'key':<8} value")
            for part in c.request(ApiKey.FETCH, 11, fetch).responses[0].partitions:
                for r in MemoryRecords(part.records).records():
                    print(f"{part.partition_index:>9} {r.offset:>6}  {r.key.decode():<8} {r.value.decode()}")
        print("\nstopping the broker ...", flush=True)
    print("done.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
