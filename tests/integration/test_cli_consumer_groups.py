"""`strom consumer-groups` (kafka-consumer-groups.sh) against a broker subprocess."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CLI = [sys.executable, "-m", "strom.cli.main"]
HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("cli-groups") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    bs = b.bootstrap
    assert strom("topics", "--bootstrap-server", bs, "--create", "--topic", "orders", "--partitions", "2").returncode == 0
    assert strom("console-producer", "--bootstrap-server", bs, "--topic", "orders",
                 input="".join(f"o{i}\n" for i in range(10))).returncode == 0
    yield b
    b.stop()
    b.cleanup()


def strom(*args: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=input, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return strom("consumer-groups", "--bootstrap-server", broker.bootstrap, *args)


def table(stdout: str) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return [line.split() for line in lines]


def end_offsets(broker: BrokerProcess) -> dict[int, int]:
    from strom.admin import AdminClient, OffsetSpec, TopicPartition

    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        found = admin.list_offsets({TopicPartition("orders", p): OffsetSpec.latest() for p in (0, 1)}).all().result(10)
    return {tp.partition: info.offset for tp, info in found.items()}


def test_describe_an_inactive_group_then_reset_and_delete(broker: BrokerProcess) -> None:
    consumed = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "orders", "--group",
                     "billing", "--from-beginning", "--max-messages", "6")
    assert consumed.returncode == 0, consumed.stderr

    listed = groups(broker, "--list")
    assert listed.returncode == 0 and "billing" in listed.stdout.split()
    states = table(groups(broker, "--list", "--state").stdout)
    assert states[0] == ["GROUP", "STATE"] and ["billing", "Empty"] in states

    described = groups(broker, "--describe", "--group", "billing")
    assert described.returncode == 0
    assert described.stdout.startswith("\n")
    rows = table(described.stdout)
    assert rows[0] == HEADER
    ends = end_offsets(broker)
    body = {int(r[2]): r for r in rows[1:]}
    assert set(body) == {0, 1} and sum(int(r[3]) for r in body.values()) == 6
    for partition, r in body.items():
        assert r[0:2] == ["billing", "orders"]
        assert int(r[4]) == ends[partition] and int(r[5]) == ends[partition] - int(r[3])
        assert r[6:] == ["-", "-", "-"]
    assert described.stderr.strip() == "Consumer group 'billing' has no active members."

    state = table(groups(broker, "--describe", "--group", "billing", "--state").stdout)
    assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert state[1][0] == "billing" and state[1][-2:] == ["Empty", "0"]

    # dry run (the default): shows the new offsets, changes nothing
    dry = groups(broker, "--reset-offsets", "--group", "billing", "--all-topics", "--to-earliest")
    assert dry.returncode == 0
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["billing", "orders", "0", "0"],
                                 ["billing", "orders", "1", "0"]]
    assert "--execute option is missing" in dry.stderr
    assert table(groups(broker, "--describe", "--group", "billing").stdout)[1:] == rows[1:]

    executed = groups(broker, "--reset-offsets", "--group", "billing", "--topic", "orders:0", "--shift-by", "-1",
                      "--execute")
    assert executed.returncode == 0, executed.stderr
    after = {int(r[2]): r for r in table(groups(broker, "--describe", "--group", "billing").stdout)[1:]}
    assert int(after[0][3]) == max(0, int(body[0][3]) - 1) and after[1][3] == body[1][3]
    to_offset = groups(broker, "--reset-offsets", "--group", "billing", "--topic", "orders", "--to-offset", "1000",
                       "--execute")
    assert "is higher than latest offset for topic partition orders-0" in to_offset.stderr
    after = {int(r[2]): r for r in table(groups(broker, "--describe", "--group", "billing").stdout)[1:]}
    assert {p: int(r[3]) for p, r in after.items()} == ends and {r[5] for r in after.values()} == {"0"}
    latest = groups(broker, "--reset-offsets", "--group", "billing", "--topic", "orders", "--to-datetime",
                    "2000-01-01T00:00:00.000", "--dry-run")
    assert [r[3] for r in table(latest.stdout)[1:]] == ["0", "0"]

    deleted = groups(broker, "--delete", "--group", "billing")
    assert (deleted.returncode, deleted.stdout.strip()) == (
        0, "Deletion of requested consumer groups ('billing') was successful.")
    assert "billing" not in groups(broker, "--list").stdout.split()


def test_describe_an_active_group(broker: BrokerProcess) -> None:
    consumer = subprocess.Popen([*CLI, "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
                                 "orders", "--group", "live", "--from-beginning",
                                 "--consumer-property", "client.id=live-client"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert consumer.stdout is not None
        for _ in range(10):
            consumer.stdout.readline()
        deadline = time.monotonic() + 20
        while True:  # wait until the group is Stable and has committed (auto-commit every 5 s)
            rows = table(groups(broker, "--describe", "--group", "live").stdout)
            if len(rows) == 3 and all(r[3] != "-" for r in rows[1:]):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.3)
        for r in rows[1:]:
            assert r[0:2] == ["live", "orders"] and r[6].startswith("live-client-")
            assert r[7].endswith("127.0.0.1") and r[8] == "live-client" and r[5] == "0"
        members = table(groups(broker, "--describe", "--group", "live", "--members", "--verbose").stdout)
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1][0] == "live" and members[1][3:] == ["live-client", "2", "orders(0,1)"]
        state = table(groups(broker, "--describe", "--group", "live", "--state").stdout)
        assert state[1][-3:] == ["range", "Stable", "1"]

        busy = groups(broker, "--reset-offsets", "--group", "live", "--all-topics", "--to-earliest", "--execute")
        assert busy.returncode == 1
        assert ("Error: Assignments can only be reset if the group 'live' is inactive, but the current state is "
                "Stable.") in busy.stderr
        refused = groups(broker, "--delete", "--group", "live")
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            "Error: Deletion of some consumer groups failed:",
            "* Group 'live' could not be deleted due to: NonEmptyGroupError: The group is not empty."]
        described_all = groups(broker, "--describe", "--all-groups")
        assert "live" in described_all.stdout
    finally:
        consumer.send_signal(signal.SIGINT)
        consumer.communicate(timeout=20)
    assert consumer.returncode == 0


def test_unknown_group_and_bad_states(broker: BrokerProcess) -> None:
    missing = groups(broker, "--describe", "--group", "ghost")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == ["Error: Consumer group 'ghost' does not exist."]
    deleted = groups(broker, "--delete", "--group", "ghost")
    assert deleted.returncode == 1
    assert "* Group 'ghost' could not be deleted due to: GroupIdNotFoundError: The group id does not exist." \
        in deleted.stderr
    bad_state = groups(broker, "--list", "--state", "Sleepy")
    assert bad_state.returncode == 2 and bad_state.stderr.startswith("Error: Invalid state list 'Sleepy'")
    no_topic = groups(broker, "--reset-offsets", "--group", "ghost", "--topic", "nosuch", "--to-earliest")
    assert no_topic.returncode == 1 and "Topic 'nosuch' does not exist" in no_topic.stderr


def test_delete_offsets_of_an_inactive_and_an_active_group(broker: BrokerProcess) -> None:
    from strom.admin import AdminClient, TopicPartition
    from strom.consumer import KafkaConsumer

    consumed = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "orders", "--group",
                     "audit", "--from-beginning", "--max-messages", "10")
    assert consumed.returncode == 0, consumed.stderr
    tps = [TopicPartition("orders", p) for p in (0, 1)]

    def committed(group: str) -> dict[int, int | None]:
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            found = admin.list_consumer_group_offsets(group, partitions=tps).partitions_to_offset_and_metadata(
                group).result(10)
        return {tp.partition: None if om is None else om.offset for tp, om in found.items()}

    before = committed("audit")
    assert None not in before.values()
    deleted = groups(broker, "--delete-offsets", "--group", "audit", "--topic", "orders:0")
    assert deleted.returncode == 0, deleted.stderr
    assert table(deleted.stdout) == [["Request", "succeed", "for", "deleting", "offsets", "with", "topic", "orders",
                                      "group", "audit"], ["TOPIC", "PARTITION", "STATUS"], ["orders", "0", "Successful"]]
    assert committed("audit") == {0: None, 1: before[1]}

    # a member consuming the topic: the broker refuses each of its partitions (GROUP_SUBSCRIBED_TO_TOPIC)
    live = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "live", "auto.offset.reset": "earliest"},
                         key_deserializer="bytes", value_deserializer="bytes")
    try:
        live.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while len(live.assignment()) < 2:
            assert time.monotonic() < deadline, "the member never got both partitions"
            live.poll(0.2)
        live.commit_sync({tp: 1 for tp in tps})
        refused = groups(broker, "--delete-offsets", "--group", "live", "--topic", "orders")
        assert refused.returncode == 1
        assert "Encounter some partition level error" in refused.stderr
        rows = table(refused.stdout)
        assert rows[0] == ["TOPIC", "PARTITION", "STATUS"] and [r[:3] for r in rows[1:]] == [
            ["orders", "0", "Error:"], ["orders", "1", "Error:"]]
        assert all("subscribed" in " ".join(r).lower() for r in rows[1:]), rows
        assert committed("live") == {0: 1, 1: 1}
    finally:
        live.close()

    unknown = groups(broker, "--delete-offsets", "--group", "no-such-group", "--topic", "orders")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert len(unknown.stderr.strip().splitlines()) == 1 and "no-such-group" in unknown.stderr
    usage = groups(broker, "--delete-offsets", "--group", "audit")
    assert usage.returncode == 2 and "[group], [topic]" in usage.stderr


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    return {int(r[2]): int(r[3]) for r in table(groups(broker, "--describe", "--group", group).stdout)[1:]}


def test_export_and_reset_from_file(broker: BrokerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """kafka-consumer-groups.sh's offsets backup: --export prints the new offsets as CSV, --from-file puts them
    back (one group: topic,partition,offset; several: group,topic,partition,offset)."""
    for group, n in (("backup", 5), ("backup-2", 3)):
        consumed = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "orders", "--group",
                         group, "--from-beginning", "--max-messages", str(n))
        assert consumed.returncode == 0, consumed.stderr
    before = committed(broker, "backup")
    exported = groups(broker, "--reset-offsets", "--group", "backup", "--all-topics", "--to-current", "--export",
                      "--dry-run")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f"orders,{p},{o}" for p, o in sorted(before.items())] + [""]
    saved = tmp_path / "backup.csv"
    saved.write_text(exported.stdout)

    assert groups(broker, "--reset-offsets", "--group", "backup", "--all-topics", "--to-earliest",
                  "--execute").returncode == 0
    assert set(committed(broker, "backup").values()) == {0}
    restored = groups(broker, "--reset-offsets", "--group", "backup", "--from-file", str(saved), "--execute")
    assert restored.returncode == 0, restored.stderr
    assert table(restored.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
        ["backup", "orders", str(p), str(o)] for p, o in sorted(before.items())]
    assert committed(broker, "backup") == before

    # two groups: the group comes first; each group takes its own lines
    both = groups(broker, "--reset-offsets", "--group", "backup", "--group", "backup-2", "--all-topics",
                  "--to-current", "--export")
    lines = both.stdout.split()
    assert lines and all(line.split(",")[0] in ("backup", "backup-2") and len(line.split(",")) == 4
                         for line in lines), both.stdout
    second = committed(broker, "backup-2")
    saved.write_text(both.stdout)
    assert groups(broker, "--reset-offsets", "--group", "backup-2", "--all-topics", "--to-latest",
                  "--execute").returncode == 0
    back = groups(broker, "--reset-offsets", "--group", "backup", "--group", "backup-2", "--from-file", str(saved),
                  "--execute")
    assert back.returncode == 0, back.stderr
    assert committed(broker, "backup-2") == second and committed(broker, "backup") == before

    # errors: a group the file does not name, a line that is not CSV, a file that is not there
    missing = groups(broker, "--reset-offsets", "--group", "billing-none", "--group", "backup", "--from-file",
                     str(saved), "--dry-run")
    assert missing.returncode == 1 and "No reset plan for group billing-none found" in missing.stderr
    saved.write_text("orders,zero,1\n")
    bad = groups(broker, "--reset-offsets", "--group", "backup", "--from-file", str(saved))
    assert bad.returncode == 2 and "line 1: 'orders,zero,1'" in bad.stderr and len(bad.stderr.splitlines()) == 1
    gone = groups(broker, "--reset-offsets", "--group", "backup", "--from-file", str(tmp_path / "nope.csv"))
    assert gone.returncode == 2 and "Cannot read the reset plan" in gone.stderr
    scoped = groups(broker, "--reset-offsets", "--group", "backup", "--all-topics", "--from-file", str(saved))
    assert scoped.returncode == 2
