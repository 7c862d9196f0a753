"""The broker's log levels, read and changed at runtime (Kafka's ``Log4jController`` behind the BROKER_LOGGER
config resource: ``strom configs --entity-type broker-loggers --entity-name 1``).

Loggers are Python's: ``root`` and the ``strom`` loggers the broker has made (``strom.server``,
``strom.storage`` ...), each with its effective level in Kafka's names (TRACE, DEBUG, INFO, WARN, ERROR, FATAL,
OFF). Setting a level sets that logger's; deleting it makes the logger follow its parent again (Kafka: the root
logger's level). Changes last until the broker stops, as in Kafka. Event loop only.
"""

from __future__ import annotations

import logging

__all__ = ["ROOT_LOGGER", "LEVELS", "BrokerLoggerError", "describe_loggers", "set_log_level", "unset_log_level"]

ROOT_LOGGER = "root"
TRACE = 5  # below DEBUG: Python has no TRACE level
LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
_PREFIX = "strom"


class BrokerLoggerError(ValueError):
    """A logger that does not exist or a level that is not one (Kafka: InvalidConfigurationException)."""


def _level_name(level: int) -> str:
    """Kafka's name of a Python level: the most verbose Kafka level that lets the same records through."""
    for name, value in sorted(LEVELS.items(), key=lambda kv: kv[1]):
        if level <= value:
            return name
    return "OFF"


def _loggers() -> dict[str, logging.Logger]:
    found = {ROOT_LOGGER: logging.getLogger()}
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and (name == _PREFIX or name.startswith(_PREFIX + ".")):
            found[name] = logger
    return found


def describe_loggers() -> list[tuple[str, str]]:
    """(logger, effective level) of every logger, ``root`` first, as Kafka lists them."""
    loggers = _loggers()
    return [(ROOT_LOGGER, _level_name(loggers[ROOT_LOGGER].getEffectiveLevel()))] + [
        (name, _level_name(lg.getEffectiveLevel())) for name, lg in sorted(loggers.items()) if name != ROOT_LOGGER]


def _logger(name: str) -> logging.Logger:
    logger = _loggers().get(name)
    if logger is None:
        raise BrokerLoggerError(f"Logger {name} does not exist!")
    return logger


def check_level(name: str, level: str | None) -> None:
    _logger(name)
    if level is None or level.upper() not in LEVELS:
        raise BrokerLoggerError(f"Cannot set the log level of {name} to {level} as it is not a supported log level. "
                                f"Valid log levels are {', '.join(LEVELS)}")


def set_log_level(name: str, level: str) -> None:
    check_level(name, level)
    _logger(name).setLevel(LEVELS[level.upper()])


def unset_log_level(name: str) -> None:
    """The logger follows its parent again (the root logger's level cannot be removed)."""
    logger = _logger(name)
    if name == ROOT_LOGGER:
        raise ValueError(f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
    logger.setLevel(logging.NOTSET)
