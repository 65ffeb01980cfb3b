"""``wait``, ``submit``, ``run`` and ``cancel``: one operation, driven by this process."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, BinaryIO

import click

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._base._urls import redact_url
from waitbound._engine import _api
from waitbound._engine._operation import (
    Operation,
    Submission,
    check_first_poll_after,
    check_push,
    check_urls,
    new_operation_id,
)
from waitbound._engine._outbox import resolve_notify_secret
from waitbound._model._audit import AuditEvent, EventKind
from waitbound._model._outcome import Outcome
from waitbound._model._record import Record
from waitbound._profile._protocol import FinalStateVia, UrlKind
from waitbound.cli._exits import EXIT_CODES_HELP
from waitbound.cli._flags import (
    MAX_RESPONSE_OPTION,
    POLICY_OPTIONS,
    PROFILE_OPTIONS,
    PROGRESS_OPTIONS,
    RUN_OPTIONS,
    STORE_HELP,
    flag_names,
    http_settings,
    policy_from_flags,
    profile_from_flags,
    warn_budget,
)
from waitbound.cli._output import print_outcome
from waitbound.cli._params import DURATION_HELP, STORED_TEXT, WholeRange, duration, parse_header
from waitbound.cli._progress import Progress
from waitbound.cli._render import option_costs, printable
from waitbound.cli._store_access import MEMORY_EMPTY, drive, header_names, resume_hint
from waitbound.cli._time import timing
from waitbound.stores import Store

__all__ = ["cancel_command", "run", "submit", "wait"]

DETACHED_IN_MEMORY = "no worker could ever pick the detached operation up"
SUBMITTED_IN_MEMORY = (
    "the job would be sent and its record lost, so nothing could wait for it "
    "(use `waitbound run`, which waits in this process)"
)

PUSH_OPTIONS = [
    click.option(
        "--webhook",
        metavar="PROVIDER",
        help="Deliveries from this `waitbound serve` receiver ([webhooks.PROVIDER] of "
        "serve.toml) are expected for the job: polling slows to the backup schedule.",
    ),
    click.option(
        "--notify",
        "notify_url",
        metavar="URL",
        help="POST a signed completion webhook (Standard Webhooks) to URL when the "
        "operation finishes; needs $WAITBOUND_NOTIFY_SECRET (whsec_…).",
    ),
]


def _push_options(function: Any) -> Any:
    for decorator in reversed(PUSH_OPTIONS):
        function = decorator(function)
    return function


SUBMIT_OPTIONS = [
    click.argument(
        "method", type=click.Choice(["POST", "PUT", "PATCH", "DELETE", "GET"], case_sensitive=False)
    ),
    click.argument("url"),
    click.option(
        "--body",
        "body_file",
        type=click.File("rb"),
        help="Request body from FILE, or - for standard input.",
    ),
    click.option(
        "--content-type",
        default="application/json",
        show_default=True,
        help="The Content-Type of the request body (sent with a body only).",
    ),
    click.option(
        "--idempotency-key", type=STORED_TEXT, help="Sent in the profile's idempotency header."
    ),
    click.option(
        "--max-submit-attempts",
        type=WholeRange(min=1, max=10),
        default=3,
        show_default=True,
        help="Sends of a submission that got no answer, when a resend is safe: with an "
        "idempotency key, or by PUT or DELETE (idempotent methods).",
    ),
    click.option(
        "--final-state-via",
        type=click.Choice([v.value for v in FinalStateVia]),
        help="Where the final state is once the status monitor reports success "
        "(overrides the profile; default: by method, as the profile says).",
    ),
]


def _submit_options(function: Any) -> Any:
    for decorator in reversed(SUBMIT_OPTIONS):
        function = decorator(function)
    return function


@click.command(
    help="Wait on STATUS_URL until the job has one honest outcome.\n\n"
    "Resume an operation with --operation-id alone (its stored deadline and budgets "
    "apply). --detach records it for `waitbound worker` and exits 4.\n\n"
    + DURATION_HELP
    + "\n\n"
    + EXIT_CODES_HELP
)
@click.argument("status_url", required=False)
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
@click.option(
    "--detach", is_flag=True, help="Record the operation for `waitbound worker`; exit 4 at once."
)
@click.option(
    "--url-kind",
    type=click.Choice([k.value for k in UrlKind]),
    default=UrlKind.STATUS.value,
    show_default=True,
    help="How STATUS_URL's answers are read: a status monitor's body, a Location URL's "
    "status code, or the resource's own provisioning state.",
)
@click.option(
    "--first-poll-after",
    callback=duration,
    metavar="DURATION",
    help="You already hold a fresh answer: send the first status request this long after "
    "the start, not at once (less than --deadline) [default: 0s].",
)
@_push_options
def wait(  # noqa: PLR0917 - click passes every option
    status_url: str | None,
    detach: bool,
    url_kind: str,
    first_poll_after: float | None,
    webhook: str | None,
    notify_url: str | None,
    headers: Sequence[str],
    trusted_origins: Sequence[str],
    operation_id: str | None,
    credential_label: str | None,
    store: str | None,
    as_json: bool,
    progress: bool | None,
    every_event: bool,
    follow: bool,
    max_response_bytes: int | None,
    result_url: str | None,
    cancel_url: str | None,
    cancel_on_deadline: bool,
    profile_spec: str | None,
    **flags: object,
) -> int:
    sent = [parse_header(h) for h in headers]
    policy = policy_from_flags(flags)
    http = http_settings(max_response_bytes)
    operation = None
    if status_url is not None:
        operation = Operation(
            status_url=status_url,
            profile=profile_from_flags(profile_spec, flags),
            policy=policy,
            result_url=result_url,
            cancel_url=cancel_url,
            cancel_on_deadline=cancel_on_deadline,
            trusted_origins=tuple(trusted_origins),
            credential_label=credential_label,
            url_kind=UrlKind(url_kind),
            webhook=webhook,
            notify_url=notify_url,
        )
    elif operation_id is None:
        raise UsageError("give a STATUS_URL to wait on, or --operation-id to resume")
    elif webhook is not None or notify_url is not None:
        raise UsageError(
            "--webhook and --notify are set when an operation is created: give its STATUS_URL"
        )
    elif first_poll_after is not None:
        raise UsageError(
            "--first-poll-after is set when an operation is created: give its STATUS_URL"
        )
    first_poll_after_s = first_poll_after or 0.0
    try:
        check_first_poll_after(first_poll_after_s, policy)
    except UsageError as exc:
        raise UsageError(flag_names(str(exc))) from None
    if operation is not None:
        _check_new(operation, needs_secret=not detach)  # before the store is opened
    op_id = new_operation_id() if operation_id is None else operation_id
    names = header_names(sent)
    if detach:
        if operation is None:
            raise UsageError("--detach records a new operation: give its STATUS_URL")
        started = drive(
            op_id,
            store,
            lambda opened: (
                _api.start(
                    operation,
                    operation_id=op_id,
                    store=opened,
                    first_poll_after_s=first_poll_after_s,
                    **timing(),
                )
                .status()
                .outcome
            ),
            create=True,
            header_names=names,
            memory=DETACHED_IN_MEMORY,
        )
        return print_outcome(started, as_json)
    sink = Progress(progress, every_event=every_event, as_json=as_json, follow=follow)

    def act(opened: Store) -> tuple[Outcome, Record | None]:
        if operation is None and credential_label is not None:
            _check_credential_label(opened.get(op_id), credential_label)
        sink.start(op_id)
        sink.attach(opened, op_id)
        outcome = _api.wait(
            operation,
            operation_id=op_id,
            store=opened,
            headers=dict(sent),
            on_event=sink,
            http=http,
            first_poll_after_s=first_poll_after_s if operation is not None else 0.0,
            **timing(),
        )
        return outcome, opened.get(op_id)

    outcome, record = drive(
        op_id,
        store,
        act,
        create=operation is not None,
        header_names=names,
        progress=sink,
        memory=None if operation is not None else MEMORY_EMPTY,
    )
    return print_outcome(outcome, as_json, option_costs(record))


def _check_new(operation: Operation | Submission, *, needs_secret: bool) -> None:
    """Refuse a new operation's bad input: a URL that cannot be used, a bad --webhook or
    --notify, and --notify without a notify secret when this process delivers the
    completion (a detached operation's is the worker's); then say its budget warning,
    if any, so bad input gets its one line alone."""
    check_push(operation)
    check_urls(operation)
    if needs_secret:
        resolve_notify_secret(operation.notify_url, None)
    warn_budget(operation.policy)


def _check_credential_label(record: Record | None, label: str) -> None:
    """A resume's ``--credential-label`` must be the record's own: the label is set
    when the operation is created, and changed only by a person's decision
    (``resume_with_credentials``)."""
    if record is not None and record.credential_label != label:
        held = repr(record.credential_label) if record.credential_label else "none"
        raise UsageError(
            f"operation {record.operation_id} holds credential label {held}, not "
            f"{label[:40]!r}; other credentials need a person's decision: waitbound decide "
            f"{record.operation_id} resume_with_credentials --credential-label …"
        )


def _submission(flags: dict[str, Any]) -> Submission:
    """The job request from the flags of ``submit`` / ``run`` (popped from *flags*)."""
    policy = policy_from_flags(flags)
    body_file: BinaryIO | None = flags.pop("body_file")
    body = body_file.read() if body_file is not None else b""
    return Submission(
        method=str(flags.pop("method")).upper(),
        url=flags.pop("url"),
        profile=profile_from_flags(flags.pop("profile_spec"), flags),
        policy=policy,
        body=body,
        content_type=flags.pop("content_type") if body else None,
        idempotency_key=flags.pop("idempotency_key"),
        max_submit_attempts=flags.pop("max_submit_attempts"),
        final_state_via=FinalStateVia(via) if (via := flags.pop("final_state_via")) else None,
        result_url=flags.pop("result_url"),
        cancel_url=flags.pop("cancel_url"),
        cancel_on_deadline=bool(flags.pop("cancel_on_deadline")),
        trusted_origins=tuple(flags.pop("trusted_origins")),
        credential_label=flags.pop("credential_label"),
        webhook=flags.pop("webhook"),
        notify_url=flags.pop("notify_url"),
    )


def _submitted(record: Record, as_json: bool, hint: str) -> int:
    receipt: dict[str, JSON] = {
        "operation_id": record.operation_id,
        "phase": record.phase.value,
        "job_id": record.job_id,
        "status_url": redact_url(record.status_url or ""),
        "next_poll_at": record.next_poll_at.isoformat(),
        "idempotency_key": record.idempotency_key,
        "submit_fingerprint": record.submit_fingerprint,
    }
    if as_json:
        click.echo(json.dumps(receipt, ensure_ascii=False))
    else:
        click.echo(f"{record.operation_id}: submitted; job {printable(record.job_id or '(no id)')}")
        click.echo(f"wait for it: {hint.strip('`')}")
    return 0


def _submit_and_maybe_wait(flags: dict[str, Any], *, wait_for_outcome: bool) -> int:
    """The body of ``submit`` and ``run``: they take the same flags. ``run --detach``
    submits as ``submit`` does and prints what ``wait --detach`` prints (exit 4)."""
    detach = bool(flags.pop("detach", False))
    waits = wait_for_outcome and not detach
    sent = [parse_header(h) for h in flags.pop("headers")]
    http = http_settings(flags.pop("max_response_bytes"))
    submission = _submission(flags)
    _check_new(submission, needs_secret=True)
    given = flags.pop("operation_id")
    op_id = new_operation_id() if given is None else given
    as_json = bool(flags.pop("as_json"))
    sink = Progress(
        flags.pop("progress"),
        every_event=flags.pop("every_event"),
        as_json=as_json,
        follow=flags.pop("follow"),
    )
    if waits:
        sink.start(op_id)
    store = flags.pop("store")
    names = header_names(sent)

    def act(opened: Store) -> tuple[Outcome, Record | None]:
        sink.attach(opened, op_id)
        common: dict[str, Any] = {
            "operation_id": op_id,
            "store": opened,
            "headers": dict(sent),
            "on_event": sink,
            "http": http,
            **timing(),
        }
        if waits:
            outcome = _api.run(submission, **common)
        else:
            outcome = _api.submit(submission, **common).status().outcome
        return outcome, opened.get(op_id)

    memory = None if waits else DETACHED_IN_MEMORY if detach else SUBMITTED_IN_MEMORY
    outcome, record = drive(
        op_id, store, act, create=True, header_names=names, progress=sink, memory=memory
    )
    if outcome.done or record is None or detach:
        return print_outcome(outcome, as_json, option_costs(record))
    return _submitted(record, as_json, resume_hint(op_id, store, names))


@click.command(
    help="Send a job request (METHOD URL) once and record its receipt; do not wait.\n\n"
    "The operation is stored before the request is sent. With --json, prints the "
    "operation id, job id and status URL. Wait for it with the `waitbound wait "
    "--operation-id …` it prints. Exit 0 once submitted; an answer that ends the job "
    "at once exits as `wait` does.\n\n" + DURATION_HELP + "\n\n" + EXIT_CODES_HELP
)
@_submit_options
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
@_push_options
def submit(**flags: Any) -> int:
    return _submit_and_maybe_wait(flags, wait_for_outcome=False)


@click.command(
    help="Submit a job (METHOD URL), then wait on it: `submit` and `wait` in one command.\n\n"
    "Same flags as `submit`; same output as `wait`. --detach submits and records the "
    "job for `waitbound worker`, prints it as `wait --detach` does and exits 4 at once "
    "(or as `wait` does when the first answer already ended it).\n\n"
    + DURATION_HELP
    + "\n\n"
    + EXIT_CODES_HELP
)
@_submit_options
@PROFILE_OPTIONS
@POLICY_OPTIONS
@RUN_OPTIONS
@click.option(
    "--detach",
    is_flag=True,
    help="Submit and record the job for `waitbound worker`; exit 4 at once.",
)
@_push_options
def run(**flags: Any) -> int:
    return _submit_and_maybe_wait(flags, wait_for_outcome=True)


class _CancelAnswered(Exception):
    """Raised by the event sink of ``cancel --no-wait`` once the answer is persisted."""


@click.command(
    name="cancel",
    help="Cancel an operation's job through its documented cancel action, then wait for "
    "it to end (--no-wait: send the cancel, record the answer, exit 4).\n\n"
    "Refused (exit 2) when the job is not cancelable: the last status answer said "
    "cancelable false, or did not say it is and the profile does not declare it always "
    "cancelable.\n\n" + EXIT_CODES_HELP,
)
@click.argument("operation_id", type=STORED_TEXT)
@click.option("--reason", type=STORED_TEXT, help="Why; kept in the audit log.")
@click.option("--requested-by", type=STORED_TEXT, help="Who asks [default: $USER@host].")
@click.option("--header", "headers", multiple=True, help="'Name: value': sent, never stored.")
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--no-wait",
    is_flag=True,
    help="Return once the cancel's answer is recorded (exit 4 while the job still runs).",
)
@PROGRESS_OPTIONS
@MAX_RESPONSE_OPTION
def cancel_command(  # noqa: PLR0917 - click passes every option
    operation_id: str,
    reason: str | None,
    requested_by: str | None,
    headers: Sequence[str],
    store: str | None,
    as_json: bool,
    no_wait: bool,
    progress: bool | None,
    every_event: bool,
    follow: bool,
    max_response_bytes: int | None,
) -> int:
    sent = [parse_header(h) for h in headers]
    http = http_settings(max_response_bytes)
    sink = Progress(progress, every_event=every_event, as_json=as_json, follow=follow)

    def on_event(event: AuditEvent) -> None:
        sink(event)
        if no_wait and event.kind == EventKind.CANCEL_ANSWERED:
            raise _CancelAnswered

    def act(opened: Store) -> tuple[Outcome, Record | None]:
        sink.attach(opened, operation_id)
        try:
            outcome = _api.cancel(
                operation_id,
                reason=reason,
                requested_by=requested_by,
                store=opened,
                headers=dict(sent),
                on_event=on_event,
                http=http,
                **timing(),
            )
        except _CancelAnswered:
            record = opened.get(operation_id)
            assert record is not None, "a canceled operation stays in the store"
            return record.to_outcome(), record
        return outcome, opened.get(operation_id)

    outcome, record = drive(
        operation_id,
        store,
        act,
        create=False,
        header_names=header_names(sent),
        progress=sink,
    )
    return print_outcome(outcome, as_json, option_costs(record))
