"""Where the broker keeps SCRAM credentials (Kafka's ``CredentialCache`` fed from the metadata).

:class:`CredentialStore` is the interface the SASL/SCRAM server reads and AlterUserScramCredentials writes;
:class:`FileCredentialStore` is the standalone implementation, one JSON file in the broker's data dir written
atomically (a ZooKeeper-backed store under ``/config/users`` implements the same interface). Entries use Kafka's
string form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (``ScramCredentialUtils``); no
password is ever stored. Thread-safe (one lock).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import Protocol

from strom.common.errors import ConfigError
from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
from strom.storage.fs import atomic_write

__all__ = ["CredentialStore", "FileCredentialStore", "MemoryCredentialStore", "credential_to_string",
           "credential_from_string", "CREDENTIALS_FILE", "default_credential_store"]

CREDENTIALS_FILE = "scram-credentials.json"


def credential_to_string(c: ScramCredential) -> str:
    b64 = base64.b64encode
    return (f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
            f"server_key={b64(c.server_key).decode()},iterations={c.iterations}")


def credential_from_string(text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(","))
    try:
        return ScramCredential(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                               base64.b64decode(fields["server_key"]), int(fields["iterations"]))
    except (KeyError, ValueError) as e:
        raise ValueError(f"invalid SCRAM credential entry ({e})") from None


class CredentialStore(Protocol):
    def credential(self, username: str, mechanism: str) -> ScramCredential | None: ...
    def upsert(self, username: str, mechanism: str, credential: ScramCredential) -> None: ...
    def delete(self, username: str, mechanism: str) -> bool: ...
    def describe(self) -> dict[str, dict[str, int]]:
        """user → mechanism → iterations."""
        ...


class MemoryCredentialStore:
    """Credentials in memory (tests, and the base of the file store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def credential(self, username: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(username, {}).get(mechanism)

    def upsert(self, username: str, mechanism: str, credential: ScramCredential) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"Unknown SCRAM mechanism {mechanism}")
        with self._lock:
            self._users.setdefault(username, {})[mechanism] = credential
            self._persist()

    def delete(self, username: str, mechanism: str) -> bool:
        with self._lock:
            found = self._users.get(username, {}).pop(mechanism, None) is not None
            if username in self._users and not self._users[username]:
                del self._users[username]
            if found:
                self._persist()
            return found

    def describe(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {u: {m: c.iterations for m, c in ms.items()} for u, ms in self._users.items()}

    def _persist(self) -> None:
        pass


class FileCredentialStore(MemoryCredentialStore):
    """Credentials persisted in ``<data dir>/scram-credentials.json`` (mode 0600), replaced atomically.

    Reads notice a newer file (another store object on the same path wrote it), so every listener and the
    AlterUserScramCredentials handler agree even when each built its own store."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._load()

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _load(self) -> None:
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        try:
            raw = json.loads(self.path.read_text())
            self._users = {u: {m: credential_from_string(s) for m, s in ms.items()} for u, ms in raw.items()}
        except (OSError, ValueError) as e:
            raise ConfigError(f"Cannot read the SCRAM credentials in {self.path}: {e}") from None
        self._stamp = stamp

    def credential(self, username: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            self._load()
        return super().credential(username, mechanism)

    def describe(self) -> dict[str, dict[str, int]]:
        with self._lock:
            self._load()
        return super().describe()

    def upsert(self, username: str, mechanism: str, credential: ScramCredential) -> None:
        with self._lock:
            self._load()
        super().upsert(username, mechanism, credential)

    def delete(self, username: str, mechanism: str) -> bool:
        with self._lock:
            self._load()
        return super().delete(username, mechanism)

    def _persist(self) -> None:
        data = {u: {m: credential_to_string(c) for m, c in ms.items()} for u, ms in self._users.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(self.path), json.dumps(data, indent=1, sort_keys=True).encode())
        os.chmod(self.path, 0o600)
        self._stamp = self._file_stamp()


def default_credential_store(config: object, data_dir: str | Path | None = None) -> FileCredentialStore:
    """The standalone store: ``<data_dir or first log dir>/scram-credentials.json``."""
    base = Path(data_dir) if data_dir is not None else Path(config.log_dirs[0])  # type: ignore[attr-defined]
    return FileCredentialStore(base / CREDENTIALS_FILE)
