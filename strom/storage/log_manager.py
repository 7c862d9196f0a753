"""All partition logs of a broker across its ``log.dirs``: load, create, delete, flush, retention, checkpoints.

Kafka counterpart: ``LogManager``.

Per log dir::

    <dir>/.lock                                  exclusive flock while the manager is open
    <dir>/.kafka_cleanshutdown                   written last by shutdown(); deleted after loading
    <dir>/recovery-point-offset-checkpoint       OffsetCheckpointFile: offsets below which data is fsynced
    <dir>/log-start-offset-checkpoint            OffsetCheckpointFile: each log's start offset
    <dir>/replication-offset-checkpoint          OffsetCheckpointFile: each log's high watermark
    <dir>/cleaner-offset-checkpoint              OffsetCheckpointFile: where compaction stopped in each log
    <dir>/<topic>-<partition>/                   one Log
    <dir>/<topic>-<partition>.<uuid>-delete/     a deleted partition being removed
    <dir>/<topic>-<partition>.<uuid>-future/     a replica being moved here from another log dir (KIP-113)

Periodic work is driven by the caller (the broker's scheduler), not by threads started here:
``run_periodic_tasks(now)`` runs retention every ``retention_check_ms``, the flusher every ``flush_check_ms`` and
the checkpoints every ``checkpoint_interval_ms``, or call ``cleanup_logs``/``flush_dirty_logs``/``checkpoint_*``
directly (``flush_dirty_logs`` is meant for a worker thread; it fsyncs).

High watermarks: each log's HW is restored at load from ``replication-offset-checkpoint`` as
min(checkpoint, log end), 0 (then clamped to the log start) for a log without an entry, since in a cluster a
record beyond the checkpointed HW may not be committed. A standalone broker, where every appended record is
committed, sets the HW to the log end itself (``Log.update_high_watermark(log.log_end_offset)``).

Compaction: :meth:`startup` starts the :class:`LogCleaner` threads (``log.cleaner.*``: pass a CleanerConfig);
:meth:`shutdown` stops them first. Deleting a log aborts its cleaning; truncate through :meth:`truncate_to` /
:meth:`truncate_fully_and_start_at` so a cleaning in progress is aborted and the cleaner checkpoint follows.

Failed log dirs (JBOD, KIP-112): a dir that cannot be created or locked at start, whose logs fail to load, or whose
files fail an I/O operation later (a checkpoint, a flush, retention, an append the broker reports) is reported to
the :class:`LogDirFailureChannel` and goes offline: :meth:`handle_log_dir_failure` drops its logs, and nothing is
created, checkpointed or marked clean in it again until the broker restarts. A partition missing from every live dir
is created only when new (``is_new``), never while a dir is offline (its log may be there). Losing every dir is
fatal, as in Kafka.

Threading: thread-safe. A lock guards the partition map; each ``Log`` has its own lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from strom.storage.fs import (
    FILE_HANDLES,
    MIN_HANDLE_CAPACITY,
    atomic_write,
    count_open_fds,
    fsync_dir,
    open_file_limit,
)
from strom.storage.log import Log, parse_topic_partition
from strom.storage.log_cleaner import CleanerConfig, LogCleaner
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_failure_channel import LogDirFailureChannel, is_io_failure, is_out_of_space
from strom.storage.log_flusher import LogFlusher

__all__ = [
    "LogManager",
    "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "LOCK_FILE",
]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


PARTITION_MEMORY_BYTES = 16 * 1024
"""Heap per idle partition, rounded up from ~5 KB measured (a Log with one segment, its indexes and state)."""


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class LogManager:
    """Owns every ``Log`` of the broker."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        time: Time = SYSTEM_TIME,
        *,
        flush_check_ms: int = 1000,
        retention_check_ms: int = 300000,
        checkpoint_interval_ms: int = 60000,
        cleaner_config: CleanerConfig | None = None,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self._time = time
        self.flush_check_ms = flush_check_ms
        self.retention_check_ms = retention_check_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_counts: dict[str, int] = {d: 0 for d in self.log_dirs}  # partitions per log dir
        self._topic_configs: dict[str, LogConfig] = {}
        # Replica moves between log dirs (KIP-113): the future log of a partition being copied to another dir,
        # and the dir a replica created later should go to (AlterReplicaLogDirs before the replica exists).
        self._futures: dict[TopicPartition, Log] = {}
        self._future_locks: dict[TopicPartition, threading.Lock] = {}  # a copy step vs a truncation of both logs
        self.preferred_dirs: dict[TopicPartition, str] = {}
        self._lock_fds: list[int] = []
        now = time.milliseconds()
        self._next_retention_ms = now + retention_check_ms
        self._next_flush_ms = now + flush_check_ms
        self._next_checkpoint_ms = now + checkpoint_interval_ms
        self._shut_down = False
        self.failure_channel = failure_channel or LogDirFailureChannel()
        # A full disk takes its dir offline, as in Kafka, when other replicas can take over (a cluster); a
        # standalone broker sets this False (see report_failure).
        self.full_disk_goes_offline = True
        try:
            for d in self.log_dirs:
                if self.failure_channel.has_offline_log_dir(d):  # found failing before (e.g. its meta.properties)
                    continue
                try:
                    os.makedirs(d, exist_ok=True)
                    fd = self._lock_dir(d)
                except OSError as e:  # (a dir locked by another process is a KafkaStorageError: fatal)
                    self.failure_channel.maybe_add_offline_log_dir(d, "cannot create or lock the log dir", e)
                    continue
                self._lock_fds.append(fd)
            self._require_live_dirs()
        except BaseException:
            self._release_locks()
            raise
        self.cleaner = LogCleaner(cleaner_config or CleanerConfig(), self.live_log_dirs, self.all_logs, time)
        self.cleaner.on_io_failure = self.report_failure
        self.flusher: LogFlusher | None = None  # started by startup()

    def startup(self) -> None:
        """Start background work owned by storage (after :meth:`load_logs`): the log cleaner threads and the
        :class:`LogFlusher` that takes ``flush.messages`` and roll fsyncs off the appending thread."""
        self._check_running()
        with self._lock:
            if self.flusher is None:
                self.flusher = LogFlusher()
                for lg in self._logs.values():
                    lg.flusher = self.flusher
        self.cleaner.startup()

    @property
    def live_log_dirs(self) -> list[str]:
        """The log dirs that have not failed."""
        offline = set(self.failure_channel.offline_log_dirs)
        return [d for d in self.log_dirs if d not in offline]

    @property
    def offline_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if self.failure_channel.has_offline_log_dir(d)]

    def _require_live_dirs(self) -> None:
        if not self.live_log_dirs:
            raise KafkaStorageError(f"every log dir has failed: {', '.join(self.log_dirs)}")

    def _release_locks(self) -> None:
        for fd in self._lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock_fds = []

    def report_failure(self, log_dir: str, message: str, exc: BaseException) -> bool:
        """Take ``log_dir`` offline when ``exc`` is an I/O failure (see :class:`LogDirFailureChannel`); returns
        whether it was one. With ``full_disk_goes_offline`` off (a standalone broker), a write refused for want
        of space leaves the dir online: its writes fail until space is freed, its reads go on."""
        if not is_io_failure(exc):
            return False
        if not self.full_disk_goes_offline and is_out_of_space(exc):
            log.warning("%s: %s; the log dir stays online (its writes fail until space is freed)", message, exc)
            return True
        self.failure_channel.maybe_add_offline_log_dir(log_dir, message, exc)
        return True

    @staticmethod
    def _lock_dir(d: str) -> int:
        if not os.path.isdir(d):
            raise NotADirectoryError(f"{d} is not a directory")
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(f"log dir {d} is locked by another process") from None
        return fd

    # --- loading -----------------------------------------------------------------------------------------

    def load_logs(self, topic_configs: Mapping[str, LogConfig] | None = None) -> int:
        """Open every partition directory; returns how many logs were loaded."""
        with self._lock:
            if topic_configs:
                self._topic_configs.update(topic_configs)
            loaded = 0
            futures: list[str] = []
            for d in self.live_log_dirs:
                try:
                    loaded += self._load_dir(d, futures)
                except (OSError, KafkaStorageError) as e:
                    if not is_io_failure(e):
                        raise
                    for tp in [tp for tp, lg in self._logs.items() if os.path.dirname(lg.dir) == d]:
                        with contextlib.suppress(OSError, KafkaStorageError):
                            self._logs.pop(tp).close_handlers()
                    self._dir_counts[d] = 0
                    self.failure_channel.maybe_add_offline_log_dir(d, "loading its logs failed", e)
            self._require_live_dirs()
            for path in futures:
                if self.failure_channel.has_offline_log_dir(os.path.dirname(path)):
                    continue
                try:
                    self._load_future(path)
                except (OSError, KafkaStorageError) as e:
                    log.error("cannot resume the replica move %s (it starts again when asked again): %s", path, e)
                    shutil.rmtree(path, ignore_errors=True)
            return loaded

    def _load_future(self, path: str) -> None:
        """A replica move (KIP-113) the broker stopped in resumes: the future log loads (recovered like any log
        after a crash) and the replica manager copies the rest once the partition is hosted again. Without a
        current log in another dir there is nothing to move: the directory goes."""
        name = os.path.basename(path)[: -len(FUTURE_DIR_SUFFIX)]
        try:
            tp = parse_topic_partition(name.rsplit(".", 1)[0])
        except ValueError:
            log.warning("ignoring directory %s: not a <topic>-<partition>.<id>-future name", path)
            return
        current = self._logs.get(tp)
        if current is None or os.path.dirname(current.dir) == os.path.dirname(path) or tp in self._futures:
            log.info("removing the unfinished replica move %s: %s has no replica to move there", path, tp)
            shutil.rmtree(path, ignore_errors=True)
            return
        future = Log(path, self._config_for(tp.topic), self._time, had_clean_shutdown=False)
        future.flusher = self.flusher
        if future.log_end_offset > current.log_end_offset:  # the current log lost a tail the copy had: drop it too
            future.truncate_to(current.log_end_offset)
        self._futures[tp] = future
        self._future_locks[tp] = threading.Lock()
        log.info("resuming the move of %s to %s at offset %d of %d", tp, os.path.dirname(path),
                 future.log_end_offset, current.log_end_offset)

    def _read_checkpoint(self, path: str) -> tuple[dict[TopicPartition, int], bool]:
        try:
            return OffsetCheckpointFile(path).read(), True
        except CorruptCheckpointError as e:
            log.warning("%s; recovering every log in its directory", e)
            return {}, False

    def _load_dir(self, d: str, futures: list[str]) -> int:
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points, ok1 = self._read_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE))
        start_offsets, ok2 = self._read_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT_FILE))
        clean = clean and ok1 and ok2
        try:
            high_watermarks = OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT_FILE)).read()
        except CorruptCheckpointError as e:
            log.warning("%s; high watermarks of %s start at the log start offsets", e, d)
            high_watermarks = {}
        count = 0
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing deleted partition directory %s", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if name.endswith(FUTURE_DIR_SUFFIX):  # a move the broker stopped in: resumed once every dir is loaded
                futures.append(path)
                continue
            try:
                tp = parse_topic_partition(name)
            except ValueError:
                log.warning("ignoring directory %s: not a <topic>-<partition> name", path)
                continue
            if tp in self._logs:
                raise KafkaStorageError(f"partition {tp} found in both {self._logs[tp].dir} and {path}")
            self._logs[tp] = Log(
                path,
                self._config_for(tp.topic),
                self._time,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                had_clean_shutdown=clean,
                high_watermark=high_watermarks.get(tp, 0),
            )
            self._logs[tp].flusher = self.flusher
            self._dir_counts[d] += 1
            count += 1
        if os.path.exists(marker):
            os.unlink(marker)
            fsync_dir(d)
        if count:
            log.info("loaded %d logs from %s (clean shutdown: %s)", count, d, clean)
        else:  # a new (or emptied) dir: there was nothing to shut down, nothing to recover
            log.info("no logs in %s", d)
        return count

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    # --- partitions --------------------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        with self._lock:
            return self._logs.get(tp)

    def all_logs(self) -> list[tuple[TopicPartition, Log]]:
        """A snapshot of ``(topic_partition, log)`` pairs, sorted by partition."""
        with self._lock:
            return sorted(self._logs.items(), key=lambda item: item[0])

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None, *, is_new: bool = True) -> Log:
        """The log of ``tp``, created in the live log dir holding the fewest partitions when missing.

        ``config`` (if given) becomes the topic's config for this and later partitions of the topic. ``is_new``:
        the partition has no data anywhere yet (a new topic or replica); a missing log of a partition that is not
        new is not created while a log dir is offline (its data may be there): KafkaStorageError, as Kafka's
        ``getOrCreateLog``.
        """
        return self.get_or_create_logs([tp], config, is_new=is_new)[0]

    def get_or_create_logs(self, tps: list[TopicPartition], config: LogConfig | None = None, *,
                           is_new: bool = True) -> list[Log]:
        """:meth:`get_or_create_log` for many partitions (CreateTopics / CreatePartitions), with one directory
        fsync per log dir instead of one per partition. Raises ValueError before creating anything when a name is
        illegal."""
        for tp in tps:
            if not _LEGAL_TOPIC.match(tp.topic) or tp.topic in (".", "..") or tp.partition < 0:
                raise ValueError(f"illegal topic partition {tp}")
        out: list[Log] = []
        parents: set[str] = set()
        with self._lock:
            self._check_running()
            try:
                for tp in tps:
                    existing = self._logs.get(tp)
                    if existing is not None:
                        out.append(existing)
                        continue
                    offline = self.offline_log_dirs
                    if offline and not is_new:
                        raise KafkaStorageError(f"Can not create log for {tp} because log directories "
                                                f"{','.join(offline)} are offline")
                    live = self.live_log_dirs
                    if not live:
                        raise KafkaStorageError(f"Can not create log for {tp}: every log dir is offline")
                    if config is not None:
                        self._topic_configs[tp.topic] = config
                    preferred = self.preferred_dirs.pop(tp, None)
                    parent = preferred if preferred in live else min(live, key=lambda d: self._dir_counts[d])
                    path = os.path.join(parent, f"{tp.topic}-{tp.partition}")
                    fresh = not os.path.exists(path)
                    try:
                        new_log = Log(path, self._config_for(tp.topic), self._time, had_clean_shutdown=fresh)
                    except (OSError, KafkaStorageError) as e:
                        self.report_failure(parent, f"creating the log of {tp} failed", e)
                        raise
                    new_log.flusher = self.flusher
                    parents.add(parent)
                    self._logs[tp] = new_log
                    self._dir_counts[parent] += 1
                    out.append(new_log)
            finally:
                for parent in parents:
                    try:
                        fsync_dir(parent)
                    except OSError as e:
                        self.report_failure(parent, "syncing the log dir failed", e)
                        raise KafkaStorageError(f"syncing {parent} failed: {e}") from e
        return out

    # --- moving a replica to another log dir (KIP-113) ---------------------------------------------------------

    def future_log(self, tp: TopicPartition) -> Log | None:
        with self._lock:
            return self._futures.get(tp)

    def all_future_logs(self) -> list[tuple[TopicPartition, Log]]:
        with self._lock:
            return sorted(self._futures.items(), key=lambda item: item[0])

    def create_future_log(self, tp: TopicPartition, log_dir: str) -> Log:
        """An empty log in ``log_dir`` starting at ``tp``'s log start offset, to copy ``tp``'s records into."""
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            self._check_running()
            current = self._require_log(tp)
            if log_dir not in self.log_dirs:
                raise KafkaStorageError(f"{log_dir} is not a log dir of this broker")
            if self.failure_channel.has_offline_log_dir(log_dir):
                raise KafkaStorageError(f"log dir {log_dir} is offline")
            if tp in self._futures:
                raise KafkaStorageError(f"{tp} is already being moved to {os.path.dirname(self._futures[tp].dir)}")
            path = os.path.join(log_dir, f"{tp.topic}-{tp.partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
            future = Log(path, self._config_for(tp.topic), self._time, had_clean_shutdown=True)
            future.flusher = self.flusher
            future.truncate_fully_and_start_at(current.log_start_offset)
            self._futures[tp] = future
            self._future_locks[tp] = threading.Lock()
        fsync_dir(log_dir)
        return future

    def copy_to_future(self, tp: TopicPartition, max_bytes: int) -> int:
        """Copy the next whole batches (about ``max_bytes``) of ``tp``'s log into its future log, as a follower
        appends what it fetched; the bytes copied (0: caught up, -1: no move of ``tp``). Blocking (disk)."""
        lock = self._future_locks.get(tp)
        if lock is None:
            return -1
        with lock:
            current, future = self.get_log(tp), self.future_log(tp)
            if current is None or future is None:
                return -1
            if future.log_end_offset < current.log_start_offset:  # retention or DeleteRecords moved on meanwhile
                future.truncate_fully_and_start_at(current.log_start_offset)
            if future.log_end_offset >= current.log_end_offset:
                return 0
            data = current.read(future.log_end_offset, max_bytes, min_one_message=True)
            records = bytes(data.records)
            if records:
                future.append_as_follower(records)
            return len(records)

    def abort_future_log(self, tp: TopicPartition) -> bool:
        """Give up moving ``tp``: its future log is deleted."""
        with self._lock:
            future = self._futures.pop(tp, None)
            lock = self._future_locks.pop(tp, None)
        if future is None:
            return False
        if lock is not None:
            with lock:  # a copy step in progress finishes first
                future.delete()
        else:
            future.delete()
        return True

    def replace_current_with_future(self, tp: TopicPartition) -> tuple[Log, Log]:
        """Finish a move: the future log, which must hold every record of the current one, becomes ``tp``'s log
        under its final name; returns ``(new log, old log)``. The old log's directory is renamed ``...-delete``
        and left open (reads in flight keep their files); delete it with :meth:`delete_replaced_log`. Call it
        with no append to ``tp`` in between (the broker's event loop)."""
        with self._lock:
            current = self._require_log(tp)
            future = self._futures.get(tp)
            if future is None or future.log_end_offset != current.log_end_offset:
                raise KafkaStorageError(f"the future log of {tp} has not caught up")
            del self._futures[tp]
            self._future_locks.pop(tp, None)
            for epoch, start in current.leader_epoch_cache.entries:
                if epoch > (future.leader_epoch_cache.latest_epoch or -1):
                    future.leader_epoch_cache.assign(epoch, start)
            hw, start = current.high_watermark, current.log_start_offset
            future.close()  # flushed, producer state snapshot written
            old_parent, new_parent = os.path.dirname(current.dir), os.path.dirname(future.dir)
            final = os.path.join(new_parent, f"{tp.topic}-{tp.partition}")
            doomed = f"{current.dir}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            try:
                os.rename(future.dir, final)
                os.rename(current.dir, doomed)
                fsync_dir(new_parent)
                fsync_dir(old_parent)
            except OSError as e:
                raise KafkaStorageError(f"could not move {tp} to {new_parent}: {e}") from e
            current.dir = doomed
            new_log = Log(final, self._config_for(tp.topic), self._time, recovery_point=future.log_end_offset,
                          log_start_offset=start, had_clean_shutdown=True, high_watermark=hw)
            new_log.flusher = self.flusher
            self._logs[tp] = new_log
            self._dir_counts[old_parent] -= 1
            self._dir_counts[new_parent] += 1
        self.cleaner.manager.abort_cleaning(tp)
        for parent in (old_parent, new_parent):
            try:
                self.cleaner.manager.update_checkpoint(parent, tp, None)
            except (OSError, KafkaStorageError) as e:
                log.warning("could not reset the cleaner checkpoint of %s in %s: %s", tp, parent, e)
        log.info("%s moved from %s to %s", tp, old_parent, new_parent)
        return new_log, current

    @staticmethod
    def delete_replaced_log(old: Log) -> None:
        """Remove the directory of a log :meth:`replace_current_with_future` replaced. Blocking."""
        old.delete()

    def delete_log(self, tp: TopicPartition) -> bool:
        """Remove ``tp``'s log: rename its dir to ``<topic>-<partition>.<uuid>-delete``, then delete it (and a
        move of it to another log dir in progress)."""
        self.abort_future_log(tp)
        with self._lock:
            doomed = self._logs.pop(tp, None)
            if doomed is not None:
                parent = os.path.dirname(doomed.dir)
                self._dir_counts[parent] = self._dir_counts.get(parent, 1) - 1
        if doomed is None:
            return False
        parent = os.path.dirname(doomed.dir)
        self.cleaner.manager.abort_cleaning(tp)
        doomed.close_handlers()
        target = f"{doomed.dir}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            os.rename(doomed.dir, target)  # renames and unlinks need no free space: this works on a full disk
            fsync_dir(parent)
        except OSError as e:
            raise KafkaStorageError(f"could not delete {doomed.dir}: {e}") from e
        shutil.rmtree(target, ignore_errors=True)
        try:  # after the space is freed; a stale entry would only be reset at the next cleaning
            self.cleaner.manager.update_checkpoint(parent, tp, None)
        except (OSError, KafkaStorageError) as e:
            log.warning("could not remove %s from the cleaner checkpoint of %s: %s", tp, parent, e)
        return True

    def handle_log_dir_failure(self, log_dir: str) -> list[TopicPartition]:
        """``log_dir`` went offline: its logs leave the manager (their files are closed, not flushed: the dir is
        not written to again), a replica being moved into it stops moving, one being moved out of it loses its
        copy; returns the partitions whose log was there (Kafka's ``LogManager.handleLogDirFailure``)."""
        log_dir = os.path.abspath(log_dir)
        self.failure_channel.maybe_add_offline_log_dir(log_dir, "taken offline")
        with self._lock:
            gone = {tp: lg for tp, lg in self._logs.items() if os.path.dirname(lg.dir) == log_dir}
            for tp in gone:
                del self._logs[tp]
            stranded = [tp for tp, f in self._futures.items() if tp in gone or os.path.dirname(f.dir) == log_dir]
            self._dir_counts[log_dir] = 0
            for tp, d in list(self.preferred_dirs.items()):
                if d == log_dir:
                    del self.preferred_dirs[tp]
        for tp in stranded:
            future = self.future_log(tp)
            if future is not None and os.path.dirname(future.dir) != log_dir:
                self.abort_future_log(tp)  # a copy in a live dir of a log that is offline now
            else:
                with self._lock:
                    self._futures.pop(tp, None)
                    self._future_locks.pop(tp, None)
                if future is not None:
                    with contextlib.suppress(OSError, KafkaStorageError):
                        future.close_handlers()
        self.cleaner.handle_log_dir_failure(log_dir, list(gone))
        for lg in gone.values():
            try:
                lg.close_handlers()
            except (OSError, KafkaStorageError) as e:
                log.debug("closing %s after its dir failed: %s", lg.dir, e)
        log.error("log dir %s is offline: %d logs in it are no longer served (%s)", log_dir, len(gone),
                  self.failure_channel.reason(log_dir))
        return sorted(gone)

    def check_capacity(self, new_partitions: int) -> str | None:
        """Whether ``new_partitions`` more partitions can be created here: None when they fit, else a message
        for the operator (CreateTopics / CreatePartitions answer it instead of creating them).

        Descriptors do not grow with the partition count (idle segments keep none: see
        :class:`strom.storage.fs.FileHandleCache`), but storage needs some free ones to work at all. Memory does
        grow: about ``PARTITION_MEMORY_BYTES`` per partition, checked against half of MemAvailable.
        """
        if new_partitions <= 0:
            return None
        soft, _hard = open_file_limit()
        free = soft - count_open_fds() + len(FILE_HANDLES)  # idle storage descriptors can be given back
        if free < MIN_HANDLE_CAPACITY:
            return (
                f"cannot create {new_partitions} partitions: only {free} of {soft} file descriptors "
                f"(RLIMIT_NOFILE) are free; raise the limit (ulimit -n) and restart the broker"
            )
        available = _memory_available()
        need = new_partitions * PARTITION_MEMORY_BYTES
        if available is not None and need > available // 2:
            return (
                f"cannot create {new_partitions} partitions: they need about {need >> 20} MiB of broker memory "
                f"and only {available >> 20} MiB is available"
            )
        return None

    def truncate_to(self, tp: TopicPartition, offset: int) -> bool:
        """Truncate ``tp``'s log (a follower dropping a divergent tail), with compaction of it paused meanwhile
        and its cleaner checkpoint lowered to the new end. Returns whether anything was removed."""
        lg = self._require_log(tp)
        future, lock = self.future_log(tp), self._future_locks.get(tp)
        if future is not None and lock is not None:  # as Kafka's truncateTo: a replica being moved, in both places
            with lock:
                future.truncate_to(min(offset, future.log_end_offset))
        self.cleaner.abort_and_pause_cleaning(tp)
        try:
            removed = lg.truncate_to(offset)
            self.cleaner.manager.truncate_checkpoint(os.path.dirname(lg.dir), tp, lg.log_end_offset)
            return removed
        finally:
            self.cleaner.resume_cleaning(tp)

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None:
        """Restart ``tp``'s log empty at ``offset`` (a follower far behind the leader's log start)."""
        lg = self._require_log(tp)
        future, lock = self.future_log(tp), self._future_locks.get(tp)
        if future is not None and lock is not None:
            with lock:
                future.truncate_fully_and_start_at(offset)
        self.cleaner.abort_and_pause_cleaning(tp)
        try:
            lg.truncate_fully_and_start_at(offset)
            self.cleaner.manager.update_checkpoint(os.path.dirname(lg.dir), tp, offset)
        finally:
            self.cleaner.resume_cleaning(tp)

    def _require_log(self, tp: TopicPartition) -> Log:
        lg = self.get_log(tp)
        if lg is None:
            raise KafkaStorageError(f"no log for {tp}")
        return lg

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply a new config to every partition of ``topic`` (and to partitions created later)."""
        with self._lock:
            self._topic_configs[topic] = config
            logs = [lg for tp, lg in self._logs.items() if tp.topic == topic]
        for lg in logs:
            lg.update_config(config)

    def topic_config(self, topic: str) -> LogConfig:
        with self._lock:
            return self._config_for(topic)

    # --- periodic work -----------------------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        """Retention over every log; returns the number of segments deleted."""
        deleted = 0
        for _tp, lg in self.all_logs():
            try:
                deleted += lg.delete_old_segments()
            except (OSError, KafkaStorageError) as e:
                if not self.report_failure(os.path.dirname(lg.dir), f"retention of {lg.dir} failed", e):
                    log.exception("retention failed for %s", lg.dir)
        return deleted

    def flush_dirty_logs(self) -> int:
        """Flush logs whose ``flush.ms`` elapsed, and rolled segments not yet flushed; returns logs flushed."""
        now = self._time.milliseconds()
        flushed = 0
        for _tp, lg in self.all_logs():
            try:
                if now - lg.last_flush_ms >= lg.config.flush_ms:
                    lg.flush()
                    flushed += 1
                elif lg.recovery_point < lg.active_segment.base_offset:
                    lg.flush(lg.active_segment.base_offset)
                    flushed += 1
            except (OSError, KafkaStorageError) as e:
                if not self.report_failure(os.path.dirname(lg.dir), f"flush of {lg.dir} failed", e):
                    log.exception("flush failed for %s", lg.dir)
        return flushed

    def _logs_by_dir(self) -> dict[str, dict[TopicPartition, Log]]:
        live = self.live_log_dirs
        by_dir: dict[str, dict[TopicPartition, Log]] = {d: {} for d in live}
        for tp, lg in self.all_logs():
            parent = os.path.dirname(lg.dir)
            if parent in by_dir:
                by_dir[parent][tp] = lg
        return by_dir

    def _write_checkpoints(self, file_name: str, value: Callable[[Log], int]) -> bool:
        """One checkpoint file per live log dir; a dir whose write fails goes offline. Whether all were written."""
        ok = True
        for d, logs in self._logs_by_dir().items():
            try:
                OffsetCheckpointFile(os.path.join(d, file_name)).write({tp: value(lg) for tp, lg in logs.items()})
            except OSError as e:
                ok = False
                self.report_failure(d, f"writing {file_name} failed", e)
        return ok

    def checkpoint_recovery_points(self) -> bool:
        return self._write_checkpoints(RECOVERY_POINT_CHECKPOINT_FILE, lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> bool:
        return self._write_checkpoints(LOG_START_OFFSET_CHECKPOINT_FILE, lambda lg: lg.log_start_offset)

    def checkpoint_high_watermarks(self) -> bool:
        """Write every log's high watermark to ``replication-offset-checkpoint`` in its log dir."""
        return self._write_checkpoints(REPLICATION_OFFSET_CHECKPOINT_FILE, lambda lg: lg.high_watermark)

    def run_periodic_tasks(self, now_ms: int | None = None) -> int:
        """Run whichever of retention, flush and checkpointing is due; returns ms until the next is due."""
        now = self._time.milliseconds() if now_ms is None else now_ms
        if now >= self._next_retention_ms:
            self.cleanup_logs()
            self._next_retention_ms = now + self.retention_check_ms
        if now >= self._next_flush_ms:
            self.flush_dirty_logs()
            self._next_flush_ms = now + self.flush_check_ms
        if now >= self._next_checkpoint_ms:
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()
            self._next_checkpoint_ms = now + self.checkpoint_interval_ms
        return max(0, min(self._next_retention_ms, self._next_flush_ms, self._next_checkpoint_ms) - now)

    # --- shutdown ----------------------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._shut_down:
            raise KafkaStorageError("log manager is shut down")

    def shutdown(self) -> None:
        """Flush and close every log, write both checkpoints, then the clean-shutdown marker per dir."""
        # The cleaner threads take this manager's lock to list logs: stop them before taking it. The flusher
        # finishes what is queued first (appends waiting on it learn the outcome), then logs flush inline.
        self.cleaner.shutdown()
        if self.flusher is not None:
            self.flusher.shutdown()
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            failed = False
            for tp in list(self._futures):  # unfinished moves resume at the next start
                with contextlib.suppress(OSError, KafkaStorageError):
                    self._futures.pop(tp).close()
            self._future_locks.clear()
            for lg in self._logs.values():
                try:
                    lg.close()
                except (OSError, KafkaStorageError):
                    failed = True
                    log.exception("could not close %s", lg.dir)
            try:
                written = [self.checkpoint_recovery_points(), self.checkpoint_log_start_offsets(),
                           self.checkpoint_high_watermarks()]
                if not failed and all(written):  # without the marker the next start recovers what was not flushed
                    for d in self.live_log_dirs:
                        atomic_write(os.path.join(d, CLEAN_SHUTDOWN_FILE), b"")
            except OSError as e:
                log.error("shutdown of the logs in %s was not clean: %s", self.log_dirs, e)
            finally:
                self._release_locks()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
