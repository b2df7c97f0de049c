"""Counters the device nodes keep and report, never silently: what was done and lost."""

from __future__ import annotations

from dataclasses import dataclass, fields

OK, WARN, ERROR = 0, 1, 2


@dataclass
class DeviceStats:
    """What every device node reports: its status, the current error, and failures so far.

    Written by the node's worker thread and read by the diagnostics timer: plain values, so
    a reader sees each whole.
    """

    status: str = "not configured"
    error: str = ""
    errors: int = 0  # failed reads, writes or re-opens of the device

    @property
    def level(self) -> int:
        """ERROR while the device is failing, WARN after failures, else OK."""
        if self.error:
            return ERROR
        return WARN if self.errors else OK

    @property
    def message(self) -> str:
        """One line for the diagnostics summary."""
        if self.error:
            return f"{self.status}: {self.error}"
        return self.status

    def values(self) -> list[tuple[str, str]]:
        """Every counter as (name, text) pairs."""
        return [
            (f.name, str(getattr(self, f.name)))
            for f in fields(self)
            if f.name not in ("status", "error")
        ]


@dataclass
class CaptureStats(DeviceStats):
    """Running counts of one capture stream, reported in the node's diagnostics."""

    published: int = 0
    overflows: int = 0  # the device said its input buffer overflowed
    gaps: int = 0  # jumps in stream time (blocks or frames missing)
    missing: int = 0  # items missing in those jumps
    dropped: int = 0  # items dropped because the consumer fell behind
    restarts: int = 0  # stream time went backwards (a restarted source, a clock jump)
    pacing_resyncs: int = 0  # the paced file source fell behind and skipped ahead in time

    @property
    def level(self) -> int:
        """OK, WARN (data was lost) or ERROR (the source is failing). A file that reached
        its end is OK: the status says it finished."""
        if self.error:
            return ERROR
        lost = self.overflows or self.gaps or self.dropped or self.errors
        return WARN if lost else OK

    @property
    def message(self) -> str:
        """One line for the diagnostics summary."""
        if self.error:
            return f"{self.status}: {self.error}"
        if self.level == WARN:
            return (
                f"{self.status}; lost data: {self.overflows} overflows, {self.gaps} gaps "
                f"({self.missing} missing), {self.dropped} dropped, "
                f"{self.errors} read errors"
            )
        return self.status
