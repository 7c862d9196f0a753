"""Building producer / consumer configs for the console and perf tools, and checking their topic first.

Kafka counterparts: ``CommandLineUtils.maybeMergeOptions`` (a flag given explicitly wins over
``--producer-property`` / ``--consumer-property``; a flag left at its default only fills a key nobody set) and the
config assembly of ``ConsoleProducer`` / ``ConsoleConsumer`` / ``ProducerPerformance``.

:func:`check_topic` asks the broker (through the admin client) whether the topic exists; when it does not and the
broker will not create it (``auto.create.topics.enable=false``), or when ``--partition`` names a partition the
topic does not have, the command stops with one line instead of a client waiting for metadata that never
comes. Functions only; thread-safe.
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.common import check_reachable, error_message, new_admin, wait
from strom.cli.errors import CliError
from strom.common.errors import ConfigError, KafkaError

__all__ = ["merge_option", "check_topic", "new_producer", "new_consumer"]


def merge_option(props: dict[str, Any], key: str, explicit: Any, default: Any) -> None:
    """Kafka's ``maybeMergeOptions``: an explicit flag value wins; a default only fills a missing key."""
    if explicit is not None:
        props[key] = str(explicit)
    elif key not in props and default is not None:
        props[key] = str(default)


def check_topic(args: argparse.Namespace, topic: str, partition: int | None = None) -> int | None:
    """The topic's partition count (``None`` if it does not exist yet but the broker will auto-create it)."""
    from strom.admin import ConfigResource, ConfigResourceType
    from strom.common.error_codes import UnknownTopicOrPartitionError

    admin = new_admin(args, lenient=True)
    try:
        try:
            description = wait(admin.describe_topics([topic])[topic])
        except UnknownTopicOrPartitionError:
            description = None
        except KafkaError as e:
            raise CliError(error_message(e)) from None
        if description is None:
            auto_create = True
            try:
                controller = wait(admin.describe_cluster().controller())
                if controller is not None:
                    res = ConfigResource(ConfigResourceType.BROKER, str(controller.node_id))
                    entry = wait(admin.describe_configs([res])[res]).get("auto.create.topics.enable")
                    auto_create = entry is None or str(entry.value).lower() != "false"
            except KafkaError:
                pass  # cannot tell: let the client try
            if not auto_create or partition is not None:
                raise CliError(f"Topic '{topic}' does not exist")
            return None
        count = len(description.partitions)
        if partition is not None and not 0 <= partition < count:
            raise CliError(f"Partition {partition} of topic '{topic}' does not exist (the topic has {count} "
                           f"partition{'s' if count != 1 else ''})")
        return count
    finally:
        admin.close(timeout=5)


def new_producer(props: dict[str, Any]) -> Any:
    from strom.producer.kafka_producer import KafkaProducer

    check_reachable(str(props["bootstrap.servers"]))
    try:
        return KafkaProducer(props)
    except ConfigError as e:
        raise CliError(f"Invalid producer configuration: {e}", 2) from None
    except KafkaError as e:
        raise CliError(error_message(e)) from None


def new_consumer(props: dict[str, Any]) -> Any:
    from strom.consumer.kafka_consumer import KafkaConsumer

    check_reachable(str(props["bootstrap.servers"]))
    try:
        return KafkaConsumer(props)
    except ConfigError as e:
        raise CliError(f"Invalid consumer configuration: {e}", 2) from None
    except KafkaError as e:
        raise CliError(error_message(e)) from None
