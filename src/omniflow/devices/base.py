"""What every device adapter shares: open, close, describe, and use as a context manager."""

from __future__ import annotations

import abc
from typing import Self

from omniflow.errors import ConfigError


class Device(abc.ABC):
    """A device or file that is opened, used and closed (``with`` opens and closes it)."""

    @abc.abstractmethod
    def open(self) -> None:
        """Acquire the device or file; raise the adapter's error type on failure."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device or file. Idempotent."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line saying what this device is, for logs."""

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_positive(name: str, value: int) -> None:
    """Raise ConfigError unless ``value`` is a positive integer (bools are not)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
