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
    start_async,
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
    diagnose_record,
    export_audit,
    verify_audit,
    verify_checkpoint,
)
from waitbound._audit_key import load_audit_key
from waitbound._clock import Clock, SystemClock
from waitbound._contract import Classification, Counts, Profile
from waitbound._contract_parse import load_profile, parse_profile
from waitbound._delivery import deliver_due, deliver_due_async
from waitbound._errors import (
    ConflictError,
    DecisionConflictError,
    OperationNotFoundError,
    ProfileError,
    ScenarioError,
    SchemaVersionError,
    StoreError,
    UsageError,
    WaitboundError,
)
from waitbound._escalations import (
    Escalation,
    decide,
    decide_async,
    escalations,
    escalations_async,
    request_extension,
    request_extension_async,
)
from waitbound._fan_in import (
    GroupResult,
    as_completed,
    as_completed_async,
    wait_all,
    wait_all_async,
    wait_any,
    wait_any_async,
)
from waitbound._handle import AsyncOperationHandle, OperationHandle, OperationStatus
from waitbound._metrics import observe_store
from waitbound._observation import Observation
from waitbound._operation import Operation, Submission, new_operation_id
from waitbound._options import Option, option_costs
from waitbound._outbox import Completion, replay_delivery
from waitbound._outcome import (
    EscalatedError,
    JobFailedError,
    Outcome,
    OutcomeError,
    OutcomeKind,
    Reason,
    StillWaitingError,
    StoppedWaitingError,
    TimedOutError,
)
from waitbound._policy import BudgetWarning
from waitbound._protocol import FinalStateVia, UrlKind
from waitbound._push import Channel, OutboxEntry, OutboxStatus
from waitbound._record import Decision, DecisionRequest, Grants, Phase, Policy, Record
from waitbound._schedule import DelaySource, parse_retry_after
from waitbound._worker import WorkerSettings, work
from waitbound.profiles import profile_schema
from waitbound.stores import MemoryStore, SQLiteStore, Store, open_store
from waitbound.transports import HttpSettings

__version__ = "0.1.0"

__all__ = [
    "AsyncOperationHandle",
    "AuditCheckpoint",
    "AuditEvent",
    "AuditFinding",
    "AuditProblem",
    "BudgetWarning",
    "Channel",
    "Classification",
    "Clock",
    "Completion",
    "ConflictError",
    "Counts",
    "Decision",
    "DecisionConflictError",
    "DecisionRequest",
    "DelaySource",
    "EscalatedError",
    "Escalation",
    "FinalStateVia",
    "Grants",
    "GroupResult",
    "HttpSettings",
    "JobFailedError",
    "MemoryStore",
    "Observation",
    "Operation",
    "OperationHandle",
    "OperationNotFoundError",
    "OperationStatus",
    "Option",
    "OutboxEntry",
    "OutboxStatus",
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
    "as_completed",
    "as_completed_async",
    "audit_checkpoint",
    "cancel",
    "cancel_async",
    "check",
    "check_async",
    "decide",
    "decide_async",
    "deliver_due",
    "deliver_due_async",
    "diagnose_chain",
    "diagnose_record",
    "escalations",
    "escalations_async",
    "export_audit",
    "load_audit_key",
    "load_profile",
    "new_operation_id",
    "observe_store",
    "open_store",
    "option_costs",
    "parse_profile",
    "parse_retry_after",
    "profile_schema",
    "replay_delivery",
    "request_extension",
    "request_extension_async",
    "run",
    "run_async",
    "start",
    "start_async",
    "submit",
    "submit_async",
    "verify_audit",
    "verify_chain",
    "verify_checkpoint",
    "wait",
    "wait_all",
    "wait_all_async",
    "wait_any",
    "wait_any_async",
    "wait_async",
    "work",
]
