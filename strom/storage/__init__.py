"""Broker storage: Kafka's on-disk log (segments, indexes, recovery, retention, compaction, checkpoints).

See ``log.Log`` (UnifiedLog), ``log_segment.LogSegment``, ``index.OffsetIndex``/``TimeIndex``,
``log_manager.LogManager``, ``checkpoint.OffsetCheckpointFile``, ``leader_epoch_cache.LeaderEpochFileCache``,
``log_cleaner.LogCleaner`` (compaction), ``log_validator`` (LogValidator), ``log_config.LogConfig`` and
``fs`` (atomic writes, the shared file-descriptor cache, ``raise_open_file_limit``).
"""

from strom.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from strom.storage.fetch_data_info import FetchData, FetchDataInfo, LogOffsetMetadata
from strom.storage.file_records import CorruptRecordError
from strom.storage.fs import raise_open_file_limit
from strom.storage.index import OffsetIndex, TimeIndex
from strom.storage.leader_epoch_cache import LeaderEpochFileCache
from strom.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    UnexpectedAppendOffsetError,
    parse_topic_partition,
)
from strom.storage.log_append_info import LogAppendInfo
from strom.storage.log_cleaner import CleanerConfig, LogCleaner
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_segment import LogSegment
from strom.storage.log_validator import AppendOrigin

__all__ = [
    "AppendOrigin",
    "CleanerConfig",
    "CorruptRecordError",
    "LeaderEpochFileCache",
    "LogCleaner",
    "UnexpectedAppendOffsetError",
    "raise_open_file_limit",
    "CorruptCheckpointError",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "FetchData",
    "FetchDataInfo",
    "LATEST_TIMESTAMP",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogOffsetMetadata",
    "LogSegment",
    "MAX_TIMESTAMP",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "TimeIndex",
    "parse_topic_partition",
]
