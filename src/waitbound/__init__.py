"""waitbound: bounded, durable, auditable waiting on long-running operations.

Point it at a provider's status endpoint with a profile (the provider's state
table) and a policy (deadline, budgets, pacing); get back exactly one honest
:class:`Outcome`. See ``README.md`` and ``docs/``.
"""

from waitbound._base._audit_key import load_audit_key
from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import (
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
from waitbound._base._version import VERSION as __version__
from waitbound._engine._api import (
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
from waitbound._engine._audit_check import (
    AuditCheckpoint,
    audit_checkpoint,
    diagnose_record,
    export_audit,
    verify_audit,
    verify_checkpoint,
)
from waitbound._engine._delivery import deliver_due, deliver_due_async
from waitbound._engine._escalations import (
    Escalation,
    decide,
    decide_async,
    escalations,
    escalations_async,
    request_extension,
    request_extension_async,
)
from waitbound._engine._fan_in import (
    GroupResult,
    as_completed,
    as_completed_async,
    wait_all,
    wait_all_async,
    wait_any,
    wait_any_async,
)
from waitbound._engine._handle import AsyncOperationHandle, OperationHandle, OperationStatus
from waitbound._engine._operation import Operation, Submission, new_operation_id
from waitbound._engine._outbox import Completion, replay_delivery
from waitbound._engine._worker import WorkerSettings, work
from waitbound._model._audit import (
    AuditEvent,
    AuditFinding,
    AuditProblem,
    StoredAuditEvent,
    diagnose_chain,
    verify_chain,
)
from waitbound._model._observation import Observation
from waitbound._model._outcome import (
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
from waitbound._model._push import Channel, OutboxEntry, OutboxStatus
from waitbound._model._record import Decision, DecisionRequest, Grants, Phase, Policy, Record
from waitbound._observe._metrics import observe_store
from waitbound._profile._contract import Classification, Counts, Profile
from waitbound._profile._contract_parse import load_profile, parse_profile
from waitbound._profile._policy import BudgetWarning
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound._profile._schedule import DelaySource, parse_retry_after
from waitbound._rules._options import Option, option_costs
from waitbound.profiles import profile_schema
from waitbound.stores import MemoryStore, SQLiteStore, Store, open_store
from waitbound.transports import HttpSettings

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
