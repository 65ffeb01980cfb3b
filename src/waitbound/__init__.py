"""waitbound: bounded, durable, auditable waiting on long-running operations.

Point it at a provider's status endpoint with a profile (the provider's state
table) and a policy (deadline, budgets, pacing); get back exactly one honest
:class:`Outcome`. See ``README.md`` and ``docs/``.
"""

from waitbound._api import (
    cancel,
    cancel_async,
    check,
    check_async,
    run,
    run_async,
    start,
    submit,
    submit_async,
    wait,
    wait_async,
)
from waitbound._audit import (
    AuditEvent,
    AuditFinding,
    AuditProblem,
    StoredAuditEvent,
    diagnose_chain,
    verify_chain,
)
from waitbound._audit_check import (
    AuditCheckpoint,
    audit_checkpoint,
    export_audit,
    verify_audit,
    verify_checkpoint,
)
from waitbound._audit_key import load_audit_key
from waitbound._clock import Clock, SystemClock
from waitbound._contract import Classification, Counts, Profile, load_profile, parse_profile
from waitbound._errors import (
    ConflictError,
    EscalatedError,
    JobFailedError,
    OperationNotFoundError,
    OutcomeError,
    ProfileError,
    ScenarioError,
    SchemaVersionError,
    StillWaitingError,
    StoppedWaitingError,
    StoreError,
    TimedOutError,
    UsageError,
    WaitboundError,
)
from waitbound._observation import Observation
from waitbound._operation import Operation, Submission, new_operation_id
from waitbound._outcome import Outcome, OutcomeKind, Reason
from waitbound._protocol import FinalStateVia, UrlKind
from waitbound._record import Phase, Policy, Record
from waitbound._schedule import DelaySource, parse_retry_after
from waitbound._worker import WorkerSettings, work
from waitbound.profiles import profile_schema
from waitbound.stores import MemoryStore, SQLiteStore, Store, open_store
from waitbound.transports import HttpSettings

__version__ = "0.1.0"

__all__ = [
    "AuditCheckpoint",
    "AuditEvent",
    "AuditFinding",
    "AuditProblem",
    "Classification",
    "Clock",
    "ConflictError",
    "Counts",
    "DelaySource",
    "EscalatedError",
    "FinalStateVia",
    "HttpSettings",
    "JobFailedError",
    "MemoryStore",
    "Observation",
    "Operation",
    "OperationNotFoundError",
    "Outcome",
    "OutcomeError",
    "OutcomeKind",
    "Phase",
    "Policy",
    "Profile",
    "ProfileError",
    "Reason",
    "Record",
    "SQLiteStore",
    "ScenarioError",
    "SchemaVersionError",
    "StillWaitingError",
    "StoppedWaitingError",
    "Store",
    "StoreError",
    "StoredAuditEvent",
    "Submission",
    "SystemClock",
    "TimedOutError",
    "UrlKind",
    "UsageError",
    "WaitboundError",
    "WorkerSettings",
    "__version__",
    "audit_checkpoint",
    "cancel",
    "cancel_async",
    "check",
    "check_async",
    "diagnose_chain",
    "export_audit",
    "load_audit_key",
    "load_profile",
    "new_operation_id",
    "open_store",
    "parse_profile",
    "parse_retry_after",
    "profile_schema",
    "run",
    "run_async",
    "start",
    "submit",
    "submit_async",
    "verify_audit",
    "verify_chain",
    "verify_checkpoint",
    "wait",
    "wait_async",
    "work",
]
