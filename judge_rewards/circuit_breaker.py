"""A circuit breaker for the judge client: after `threshold` consecutive failed batches it opens and
requests fail fast; after `reset_timeout` seconds one probe batch is let through (half-open); the
probe's outcome closes or re-opens it.

Each batch let through carries a `Permit`. The outcome of a batch sent before the circuit last opened
(a late answer of a batch already in flight then) reaches its caller but does not move the breaker:
the circuit stays open until its probe decides, and only the probe's outcome ends the half-open state.

The lock guards only the state fields, never a network call: batches run concurrently while the
circuit is closed, and asking the breaker costs microseconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


@dataclass(frozen=True)
class Permit:
    """Leave to send one batch: `opened` is how many times the circuit had opened when it was given."""

    opened: int
    probe: bool


class CircuitBreaker:
    def __init__(self, threshold: int, reset_timeout: float, clock=time.monotonic):
        self.threshold = threshold
        self.reset_timeout = reset_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._times_opened = 0
        self._probe_in_flight = False

    def rejects_now(self) -> bool:
        """Whether a new request would be refused now (does not take the probe slot)."""
        with self._lock:
            if self._state == OPEN:
                return self._clock() - self._opened_at < self.reset_timeout
            return self._state == HALF_OPEN and self._probe_in_flight

    def try_acquire(self) -> Permit | None:
        """The permit to send a batch now, or None; in half-open state only the one probe batch gets one."""
        with self._lock:
            if self._state == OPEN and self._clock() - self._opened_at >= self.reset_timeout:
                self._state = HALF_OPEN
                self._probe_in_flight = False
            if self._state == CLOSED:
                return Permit(self._times_opened, probe=False)
            if self._state == HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return Permit(self._times_opened, probe=True)
            return None

    def record_success(self, permit: Permit) -> bool:
        """Record a batch the judge answered; True when this (the probe's success) closed the circuit."""
        with self._lock:
            if permit.opened != self._times_opened:
                return False  # sent before the circuit opened: the probe decides
            closes = permit.probe
            self._state = CLOSED
            self._failures = 0
            self._probe_in_flight = False
            return closes

    def record_failure(self, permit: Permit) -> bool:
        """Record a failed batch; True when this opened the circuit (or re-opened it after a failed probe)."""
        with self._lock:
            if permit.opened != self._times_opened:
                return False  # sent before the circuit opened: it is open already
            self._failures += 1
            opens = permit.probe or self._failures >= self.threshold
            if opens:
                self._times_opened += 1
                self._state = OPEN
                self._opened_at = self._clock()
                self._probe_in_flight = False
            return opens

    def snapshot(self) -> dict:
        with self._lock:
            state = self._state
            if state == OPEN and self._clock() - self._opened_at >= self.reset_timeout:
                state = HALF_OPEN  # the next batch will be the probe
            return {
                "state": state,
                "failures": self._failures,
                "threshold": self.threshold,
                "reset_timeout_s": self.reset_timeout,
                "times_opened": self._times_opened,
            }
