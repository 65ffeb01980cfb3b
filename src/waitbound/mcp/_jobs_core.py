"""The agent tools' common ground: one store and one configuration, an operation read
as this server's principal sees it, and the submissions nobody can finish settled.

:class:`JobsCore` is the base of :class:`~waitbound.mcp.Jobs`: its constructor, the
store lookups every tool starts from, the scrubbing of secrets before anything is shown,
and the rule that stops a submission whose answer was lost (the background sweep's and
a look's).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Final

import anyio
import httpx

from waitbound._base._clock import Clock, SystemClock
from waitbound._base._errors import ConflictError, OperationNotFoundError, UsageError
from waitbound._engine._driver import safe_plan
from waitbound._engine._lease import holder_is_gone, new_owner
from waitbound._engine._tell import save_and_tell
from waitbound._model._audit import AuditEvent
from waitbound._model._record import Phase, Record
from waitbound._observe._metrics import label_profiles
from waitbound._rules._controller import Finish
from waitbound.mcp._answers import Answer, provider_of, scrub, view
from waitbound.mcp._config import McpConfig, ProviderConfig
from waitbound.mcp._labels import LABEL_PREFIX
from waitbound.mcp._principal import current
from waitbound.stores import Store
from waitbound.transports import HttpSettings

__all__ = ["JobsCore"]

_KEYED: Final = "mcp-"
"""The operation id prefix of a job started with the agent's own idempotency key."""
_SWEEP_LIMIT: Final = 500
"""The most open operations (newest first) one sweep for lost submissions reads."""


class JobsCore:
    """The store, the configuration and the plumbing every agent tool uses (the
    constructor's arguments are :class:`~waitbound.mcp.Jobs`'s)."""

    def __init__(
        self,
        config: McpConfig,
        store: Store,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        http: HttpSettings | None = None,
    ) -> None:
        self.config, self.store, self.client = config, store, client
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.http = http or HttpSettings(max_body_bytes=config.max_response_bytes)
        self._changed = anyio.Event()
        self._secrets = config.secrets()
        self._credentials = config.credentials()
        label_profiles(provider.profile.name for provider in config.providers.values())

    # -- plumbing -----------------------------------------------------------------

    def credentials(self, record: Record) -> Mapping[str, str]:
        """The headers *record*'s own URL gets: its provider's, when that URL is under
        the provider's ``base_url`` (``{}`` otherwise, and for other operations)."""
        return self._credentials(record)

    def changed(self) -> anyio.Event:
        """An event set at the next change this process makes or sees (an operation
        driven by its worker, a decision or request recorded through a task)."""
        return self._changed

    def _notify(self, event: AuditEvent) -> None:
        """Wake every waiting ``await_job``: some operation changed."""
        self._changed.set()
        self._changed = anyio.Event()

    def _clean(self, record: Record) -> Record:
        """*record* with configured secrets scrubbed from what the provider said, before
        any of it is cut into parts (a secret split across two parts would escape)."""
        if not self._secrets:
            return record
        secrets = self._secrets
        ending, answer, submission = record.ending, record.answer, record.submission
        return record.evolve(
            ending=ending.evolve(
                result=scrub(ending.result, secrets),
                error=scrub(ending.error, secrets),
                errors=scrub(ending.errors, secrets),
            ),
            answer=answer.evolve(
                progress=scrub(answer.progress, secrets),
                provider_state=scrub(answer.provider_state, secrets),
            ),
            submission=submission.evolve(
                result_url=scrub(submission.result_url, secrets),
                job_id=scrub(submission.job_id, secrets),
            ),
        )

    def _record(self, operation_id: object) -> Record:
        if not isinstance(operation_id, str) or not 0 < len(operation_id) <= 128:
            raise UsageError("operation_id must be the id start_job returned (1-128 characters)")
        record = self.store.get(operation_id)
        if record is None or provider_of(record) not in self.config.providers:
            raise OperationNotFoundError(operation_id)
        if not current().reaches(record.label):  # another principal's: as if unknown
            raise OperationNotFoundError(operation_id)
        return record

    def _provider(self, name: object) -> ProviderConfig:
        known = ", ".join(sorted(self.config.providers))
        if not isinstance(name, str) or name not in self.config.providers:
            raise UsageError(f"unknown provider {str(name)[:40]!r}; configured: {known}")
        return self.config.providers[name]

    # -- submissions nobody can finish ----------------------------------------------

    def _abandoned(self, record: Record) -> bool:
        """Whether nobody can finish *record*'s submission any more: the agent cannot
        resend it (no idempotency key of its own), or its deadline has passed (a keyed
        one may be resent with ``start_job`` until then)."""
        return not record.operation_id.startswith(_KEYED) or self.clock.now() >= record.stop_at

    def _settle(self, record: Record) -> Record:
        """Stop a submission nobody can finish, by the controller's own rule (its body
        and headers are never stored, so it cannot be sent from here): escalated
        ``provider_failure``, "it may have created a job", with the options a person
        has (``abandon``; ``cancel`` where a cancel action is known). One whose
        submission is in flight now (a live lease) is left as it is."""
        now = self.clock.now()
        leased = record.lease_expires_at is not None and record.lease_expires_at > now
        if leased and holder_is_gone(record.lease_owner):
            record = record.evolve(lease=record.lease.lapsed(now))
        decision = safe_plan(record, now, owner=new_owner())
        if not isinstance(decision, Finish):
            return record
        transition = decision.transition
        try:
            return save_and_tell(self.store, transition.record, transition.events, self._notify)
        except ConflictError:  # written meanwhile (its submission answered): as it is now
            return self._record(record.operation_id)

    def settle_lost_submissions(self) -> int:
        """Settle this server's submissions nobody can finish (see :meth:`_abandoned`):
        the background worker's look, so one is never left ``submitting`` with nobody
        to drive it. Reads at most ``_SWEEP_LIMIT`` open operations, newest first.

        Returns:
            How many were settled.
        """
        settled = 0
        for record in self.store.recent(
            label_prefix=LABEL_PREFIX, limit=_SWEEP_LIMIT, open_only=True
        ):
            if (
                record.phase is Phase.SUBMITTING
                and provider_of(record) in self.config.providers
                and self._abandoned(record)
                and self._settle(record).is_finished
            ):
                settled += 1
        return settled

    def _view(self, record: Record) -> Answer:
        return view(self._clean(record), self.clock.now(), max_chars=self.config.max_answer_chars)
