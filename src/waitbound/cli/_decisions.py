"""``escalations`` and ``decide``: what waits on a person, and a person's answer.

Thin adapters over :func:`waitbound.escalations` and :func:`waitbound.decide`: every
rule (which options a reason offers, the ceilings of a grant, the first decision
winning) is the API's; a refusal is one line and exit 2, and nothing is changed.
"""

from __future__ import annotations

import getpass
import json

import click

from waitbound._base._errors import UsageError
from waitbound._base._json import JSON
from waitbound._engine._escalations import decide, escalations
from waitbound._model._outcome import Outcome
from waitbound._profile._contract import Profile
from waitbound.cli._flags import STORE_HELP, profile_from_flags
from waitbound.cli._params import STORED_TEXT, NumberRange, WholeRange
from waitbound.cli._render import printable
from waitbound.cli._store_access import opened_store, resume_hint
from waitbound.cli._stored import group_document, stopped_group_lines, stopped_groups
from waitbound.stores import Store

__all__ = ["decide_command", "escalations_command"]


@click.command(
    name="escalations",
    help="List the open decision requests: operations that stopped without an honest "
    "outcome (or that an agent asked more time for), each with its options and what "
    "each costs.\n\n"
    "Groups whose own deadline or budget stopped them (`wait-all`, `wait-any`) are listed "
    "first, with the members still waiting. "
    "Answer one with `waitbound decide OPERATION_ID OPTION --why …`. A request nobody "
    "answers before its decision deadline is closed as decision_timeout on the way. "
    "Exit 0, also when nothing waits.",
)
@click.option(
    "--label-prefix",
    type=STORED_TEXT,
    default="",
    help="Only operations whose label starts with it.",
)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def escalations_command(label_prefix: str, store: str | None, as_json: bool) -> int:
    with opened_store(store, then="run the command again") as opened:
        found = escalations(store=opened, label_prefix=label_prefix)
        stopped = stopped_groups(opened)
        group_text = [stopped_group_lines(opened, row) for row in stopped]
        group_json = [group_document(opened, row) for row in stopped]
    if as_json:
        document: dict[str, object] = {
            "escalations": [escalation.as_json() for escalation in found],
            "count": len(found),
            "stopped_groups": group_json,
        }
        click.echo(json.dumps(document, ensure_ascii=False))
        return 0
    for lines in group_text:
        for line in lines:
            click.echo(printable(line))
        click.echo("")
    if not found:
        click.echo("nothing waits on a decision")
        return 0
    for index, escalation in enumerate(found):
        if index:
            click.echo("")
        for line in escalation.message.splitlines():
            click.echo(printable(line))
        click.echo("Options:")
        for option, cost in escalation.options:
            click.echo(f"  {option:<24} {printable(cost)}")
        click.echo(
            f"Decide: waitbound decide {escalation.operation_id} OPTION --why '…' "
            "[--minutes N --checks K]"
        )
    return 0


def _one_line(value: str | None, flag: str) -> str | None:
    """A flag's text, refused before anything is opened when it spans lines."""
    if value is not None and not value.strip().isprintable():
        raise UsageError(f"{flag} must be one line of printable text")
    return value


@click.command(
    name="decide",
    help="Answer OPERATION_ID's open decision request with OPTION (one of those "
    "`waitbound escalations` lists): extend, as-requested (the grant an agent proposed "
    "with request_extension, within the policy's ceilings), cancel, treat_as_pending, "
    "mark_succeeded, mark_failed, resume_with_credentials, resume_with_profile, "
    "fetch_result_again, abandon, decline.\n\n"
    "The first decision wins; a second is refused, naming who decided what and when. "
    "A resuming option (extend, …) makes the operation due again within the grant "
    "(--minutes from now, --checks more requests; the counters are not reset): continue "
    "it with the `waitbound wait --operation-id …` printed, or let any worker pick it "
    "up.\n\n"
    "Exit 0 once the decision is recorded; 2 when it is refused (nothing is changed); "
    "5 the store failed.",
)
@click.argument("operation_id", type=STORED_TEXT)
@click.argument("option", type=STORED_TEXT)
@click.option("--why", type=STORED_TEXT, help="Why, in one line (required; kept in the audit log).")
@click.option(
    "--by",
    "by",
    type=STORED_TEXT,
    help="Who decides, recorded with the OS user who ran this: 'ann (os user root)' "
    "[default: user@host].",
)
@click.option(
    "--minutes",
    type=NumberRange(),
    help="A resuming option's grant: wait at least N more minutes from now (at least 1 "
    "second, 0.0167; at most the policy's max_extension_s, which defaults to the original "
    "deadline) [default: a third of the original deadline, within that ceiling].",
)
@click.option(
    "--checks",
    type=WholeRange(),
    help="A resuming option's further requests (at least 1, at most the policy's request "
    "budget; cancel and fetch_result_again get their own request on top) [default: a "
    "third of the request budget].",
)
@click.option(
    "--profile",
    "profile_spec",
    help="resume_with_profile: the corrected profile (file or built-in name).",
)
@click.option(
    "--credential-label",
    help="resume_with_credentials: a non-secret name for the new credentials (never "
    "the secret); it must differ from the denied one.",
)
@click.option("--store", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def decide_command(  # noqa: PLR0917 - click passes every option
    operation_id: str,
    option: str,
    why: str | None,
    by: str | None,
    minutes: float | None,
    checks: int | None,
    profile_spec: str | None,
    credential_label: str | None,
    store: str | None,
    as_json: bool,
) -> int:
    if why is None or not why.strip():
        raise UsageError(
            "--why is required: say why, in one line (it is kept in the audit log); "
            "nothing was decided"
        )
    _one_line(why, "--why")
    _one_line(by, "--by")
    profile: Profile | None = None
    if profile_spec is not None:
        profile = profile_from_flags(profile_spec, {})
    if credential_label is not None and not (
        0 < len(credential_label) <= 128 and credential_label.isprintable()
    ):
        raise UsageError("--credential-label must be 1-128 printable characters")

    if by is not None and by.strip():  # a typed name: recorded with who typed it
        by = f"{by.strip()[:96]} (os user {_os_user()[:24]})"

    def act(opened: Store) -> tuple[Outcome, JSON]:
        outcome = decide(
            operation_id,
            option,
            why=why,
            by=by,
            minutes=minutes,
            checks=checks,
            profile=profile,
            credential_label=credential_label,
            store=opened,
        )
        record = opened.get(operation_id)
        assert record is not None, "a decided operation stays in the store"
        assert record.decisions, "a decision is recorded on the operation"
        last = record.decisions[-1]
        decision: JSON = {
            "option": last.option,
            "by": last.by,
            "why": last.why,
            "at": last.at.isoformat(),
            "detail": dict(last.detail),
        }
        return outcome, decision

    with opened_store(store, then="run the command again") as opened:
        outcome, decision = act(opened)
    follow = resume_hint(operation_id, store, ()).strip("`") if not outcome.done else None
    if as_json:
        document: dict[str, JSON] = {
            "operation_id": operation_id,
            "decision": decision,
            "outcome": outcome.as_json(),
            "continue_with": follow,
        }
        click.echo(json.dumps(document, ensure_ascii=False))
        return 0
    assert isinstance(decision, dict)
    click.echo(
        f"{operation_id}: decided {decision['option']} by {printable(str(decision['by']))} "
        f"({printable(str(decision['why']))})"
    )
    status = outcome.outcome.value if outcome.outcome else "due again"
    reason = f" ({outcome.reason.value})" if outcome.reason else ""
    click.echo(f"now: {status}{reason}")
    click.echo(printable(outcome.message))
    if outcome.decided_by is not None:
        click.echo(f"decided by: {printable(outcome.decided_by)}")
    if follow is not None:
        click.echo(f"continue it: {follow}")
        click.echo("(any `waitbound worker` on this store picks it up too)")
        limits = (
            decision["detail"].get("limits_after") if isinstance(decision["detail"], dict) else None
        )
        deadline = limits.get("deadline_at") if isinstance(limits, dict) else None
        if deadline is not None:
            click.echo(
                f"by {deadline}, the grant's deadline: after it nothing is sent, and the "
                "outcome says the decision was not carried out"
            )
    return 0


def _os_user() -> str:
    """The OS user running this command (``getpass.getuser()``; ``unknown`` without one)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
