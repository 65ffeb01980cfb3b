"""The error tree: one root, three branches.

::

    WaitboundError
    ├── OutcomeError                 the operation ended without success
    │   ├── JobFailedError           the provider said the job did not succeed
    │   │                            (failed, completed_with_errors, canceled, expired)
    │   ├── StoppedWaitingError      we stopped without a reported outcome
    │   │   ├── TimedOutError        deadline_exceeded; the job may still be running
    │   │   └── EscalatedError       a person must decide (``reason`` says why)
    │   └── StillWaitingError        no outcome yet (a ``check`` of a running job)
    ├── UsageError (ValueError)      you misused the API or gave bad configuration
    │   ├── ProfileError             a profile (state table) that cannot be used
    │   └── ScenarioError            a simulator scenario that cannot be used
    └── StoreError                   the durable store refused or failed
        ├── ConflictError            a compare-and-swap write lost (another writer won)
        ├── OperationNotFoundError   no operation with that id  (also a UsageError)
        └── SchemaVersionError       the store was written by a newer waitbound

The ``OutcomeError`` branch lives with the outcome it carries (``waitbound._model._outcome``);
the others are here. Errors carry structured fields, so no caller has to parse a message.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "DecisionConflictError",
    "OperationNotFoundError",
    "ProfileError",
    "ScenarioError",
    "SchemaVersionError",
    "StoreError",
    "UsageError",
    "WaitboundError",
]


class WaitboundError(Exception):
    """Root of every error waitbound raises on purpose."""


class UsageError(WaitboundError, ValueError):
    """The API was misused, or configuration is invalid.

    The message is one line that names the problem and what to do.
    """


class ProfileError(UsageError):
    """A profile (state table) was refused when loaded."""


class ScenarioError(UsageError):
    """A simulator scenario file was refused when loaded."""


class StoreError(WaitboundError):
    """The durable store refused a write or could not be used."""


class ConflictError(StoreError):
    """A versioned write lost a compare-and-swap: another writer changed the record.

    Attributes:
        operation_id: the operation whose record changed under us.
        expected_version: the version the writer had read.
    """

    def __init__(self, operation_id: str, expected_version: int) -> None:
        self.operation_id = operation_id
        self.expected_version = expected_version
        super().__init__(
            f"operation {operation_id} changed since version {expected_version}; reload it"
        )


class DecisionConflictError(UsageError):
    """Someone decided first: a decision request is answered once (compare-and-swap).

    Attributes:
        operation_id: the operation; ``decided_by``, ``option``, ``decided_at``: the
            decision that won.
    """

    def __init__(self, operation_id: str, decided_by: str, option: str, decided_at: str) -> None:
        self.operation_id = operation_id
        self.decided_by = decided_by
        self.option = option
        self.decided_at = decided_at
        super().__init__(
            f"operation {operation_id} was decided first by {decided_by} at {decided_at}: "
            f"{option}; nothing was changed"
        )


class OperationNotFoundError(StoreError, UsageError):
    """No operation with this id exists in the store."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"no operation with id {operation_id!r} in the store")


class SchemaVersionError(StoreError):
    """The store (or a record in it) was written by a newer waitbound."""
