"""KIP-380 on a real cluster: controller requests carry the epoch of the registration they are meant for (the
czxid of ``/brokers/ids/<id>``), and a broker refuses those meant for an earlier registration of itself.

A broker killed and started again at once is still registered under its old session until that session expires;
meanwhile the controller goes on sending what it queued for the dead process, to the same address. A stress run
showed what applying one does: the restarted broker became leader, and transaction coordinator, at the leader
epoch its predecessor had held, while the controller was electing another leader for those partitions."""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from strom.protocol.messages.update_metadata import UpdateMetadataRequest
from strom.testing.cluster import LocalCluster
from strom.testing.raw_client import RawClient
from tests.cluster.test_replication import create_topic, partition_meta

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_controller_requests_meant_for_an_earlier_registration_are_refused() -> None:
    with LocalCluster(3) as cluster:
        create_topic(cluster, "epochs", partitions=1, rf=3)
        meta = partition_meta(cluster, "epochs")
        follower = next(r for r in meta.replicas if r != meta.leader)
        zk = KazooClient(hosts=cluster.zk_connect)
        zk.start(timeout=30)
        try:
            registration_epoch = zk.get(f"/brokers/ids/{follower}")[1].czxid
            controller = json.loads(zk.get("/controller")[0])["brokerid"]
            controller_epoch = int(zk.get("/controller_epoch")[0])
            state = json.loads(zk.get("/brokers/topics/epochs/partitions/0/state")[0])
        finally:
            zk.stop()
            zk.close()

        def leader_and_isr(broker_epoch: int) -> LeaderAndIsrRequest:
            # What a controller that missed a restart still sends: this broker leads, at the next leader epoch.
            return LeaderAndIsrRequest(
                controller_id=controller, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name="epochs", topic_id=uuid.uuid4(), partition_states=[
                        LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                            topic_name="epochs", partition_index=0, controller_epoch=controller_epoch,
                            leader=follower, leader_epoch=state["leader_epoch"] + 1, isr=list(meta.replicas),
                            partition_epoch=state["leader_epoch"] + 1, replicas=list(meta.replicas))])])

        with RawClient(cluster.brokers[follower].bootstrap) as rc:
            lai = rc.request(ApiKey.LEADER_AND_ISR, 5, leader_and_isr(registration_epoch - 1))
            assert lai.error_code == ErrorCode.STALE_BROKER_EPOCH
            assert [p.error_code for t in lai.topics for p in t.partition_errors] == [ErrorCode.STALE_BROKER_EPOCH]
            um = rc.request(ApiKey.UPDATE_METADATA, 7, UpdateMetadataRequest(
                controller_id=controller, controller_epoch=controller_epoch, broker_epoch=registration_epoch - 1))
            assert um.error_code == ErrorCode.STALE_BROKER_EPOCH
        assert "epochs-0: became leader" not in cluster.brokers[follower].read_log()
        assert partition_meta(cluster, "epochs").leader == meta.leader

        # The same request for the current registration is applied (the check is the epoch, not the request).
        with RawClient(cluster.brokers[follower].bootstrap) as rc:
            lai = rc.request(ApiKey.LEADER_AND_ISR, 5, leader_and_isr(registration_epoch))
        assert lai.error_code == ErrorCode.NONE
        assert "epochs-0: became leader" in cluster.brokers[follower].read_log()
