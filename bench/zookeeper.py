"""KafkaZkClient partition-state writes against a real ZooKeeper: one request at a time vs pipelined.

A controller that moves leadership of many partitions (broker failure, preferred-leader election) writes one
state znode per partition; the pipelined methods send them all before awaiting any answer.

Command: .venv/bin/python bench/zookeeper.py [--partitions 500]
"""

from __future__ import annotations

import argparse
import time

from strom.common.structs import TopicPartition
from strom.server.zk import KafkaZkClient, LeaderAndIsr
from strom.testing.zookeeper import ZooKeeperServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=500)
    n = parser.parse_args().partitions
    with ZooKeeperServer() as server:
        c = KafkaZkClient.connect(server.connect_string + "/kafka", session_timeout_ms=6000,
                                  connection_timeout_ms=10000)
        try:
            c.register_controller(0)
            epoch = c.get_controller_epoch()
            assert epoch is not None
            one = [TopicPartition("one", p) for p in range(n)]
            many = [TopicPartition("many", p) for p in range(n)]
            initial = LeaderAndIsr(0, 0, (0, 1, 2), 1)

            t = time.perf_counter()
            for tp in one:
                c.create_partition_state(tp, initial, epoch[1])
            create_one = time.perf_counter() - t
            t = time.perf_counter()
            c.create_partition_states({tp: initial for tp in many}, epoch[1])
            create_many = time.perf_counter() - t

            states_one, states_many = c.get_partition_states(one), c.get_partition_states(many)
            t = time.perf_counter()
            for tp, s in states_one.items():
                c.update_leader_and_isr(tp, s.new_leader_and_isr(1, (1, 2)), s.zk_version, epoch[1])
            update_one = time.perf_counter() - t
            t = time.perf_counter()
            c.update_leader_and_isrs({tp: s.new_leader_and_isr(1, (1, 2)) for tp, s in states_many.items()},
                                     epoch[1])
            update_many = time.perf_counter() - t
            t = time.perf_counter()
            c.get_partition_states(one)
            read_many = time.perf_counter() - t
        finally:
            c.close()
    print(f"{n} partitions, fenced by the controller epoch:")
    print(f"  create state  one at a time {create_one * 1000:8.0f} ms   pipelined {create_many * 1000:6.0f} ms")
    print(f"  update state  one at a time {update_one * 1000:8.0f} ms   pipelined {update_many * 1000:6.0f} ms")
    print(f"  read states                               pipelined {read_many * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
