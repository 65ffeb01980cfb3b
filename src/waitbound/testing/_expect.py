"""``expect``: check an outcome against what the provider saw, request by request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Self

from waitbound._model._outcome import Outcome
from waitbound._profile._contract import Classification
from waitbound.testing._provider import LoggedRequest, Provider

__all__ = ["Expectation", "ExpectationFailed", "expect"]

#: An outcome as a test may hold it: waitbound's, a word, or a dict / object with fields.
OutcomeLike = Outcome | str | Mapping[str, object] | object


class ExpectationFailed(AssertionError):
    """An :class:`Expectation` did not hold; the message lists the provider's log.

    Attributes:
        problem: what was wrong, in one sentence (the message's first line).
        log: the requests the provider answered, in order.
    """

    def __init__(self, problem: str, log: Sequence[LoggedRequest]) -> None:
        lines = [r.describe() for r in log] or ["(no requests)"]
        listing = "\n  ".join(lines)
        super().__init__(f"{problem}\nprovider log ({len(log)} requests):\n  {listing}")
        self.problem = problem
        self.log = tuple(log)


def _field(outcome: object, name: str) -> object:
    if isinstance(outcome, Mapping):
        return outcome.get(name)
    return getattr(outcome, name, None)


def _word(outcome: object) -> str | None:
    """The outcome's word (``succeeded``, ``timed_out``, …), or ``None`` if it has none."""
    value = outcome if isinstance(outcome, str) else _field(outcome, "outcome")
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Expectation:
    """Checks on one outcome and the log of the provider that served it; each one
    returns the expectation, so they chain, and raises :class:`ExpectationFailed` at once.

    Build it with :func:`expect`.

    Attributes:
        got: the outcome as given.
        provider: the provider whose log is checked.
    """

    got: OutcomeLike
    provider: Provider

    def _fail(self, problem: str) -> ExpectationFailed:
        return ExpectationFailed(problem, self.provider.log())

    def _requests(self, endpoint: str) -> list[LoggedRequest]:
        return [r for r in self.provider.log() if r.endpoint == endpoint]

    def outcome(self, kind: str) -> Self:
        """Check the outcome's word, e.g. ``"succeeded"`` or ``"timed_out"``.

        A ``succeeded`` that no status answer said names the classic bug: a 2xx read
        as success.

        Raises:
            ExpectationFailed: the outcome is another one.
        """
        word = _word(self.got)
        if word == kind:
            return self
        problem = f"expected outcome {kind!r}, got {word!r}"
        said = {r.state for r in self._requests("status")}
        if word == "succeeded" and Classification.SUCCEEDED not in said:
            problem += (
                "; no status answer said the job succeeded (bug: any 2xx is success? "
                "a 200 or 202 only means the request was understood)"
            )
        elif kind == "timed_out" and word in (None, "", "succeeded"):
            problem += "; the job never finished (bug: no deadline, or an early success?)"
        raise self._fail(problem)

    def job_id(self, job_id: str) -> Self:
        """Check the job id the outcome carries (a timeout must return it).

        Raises:
            ExpectationFailed: the outcome has another job id, or none.
        """
        got = _field(self.got, "job_id")
        if got == job_id:
            return self
        problem = f"expected job_id {job_id!r}, got {got!r}"
        if _word(self.got) == "timed_out":
            problem += "; a timeout must return the job id so the caller can look again later"
        raise self._fail(problem)

    def requests(
        self,
        endpoint: str = "status",
        *,
        exactly: int | None = None,
        at_least: int | None = None,
        at_most: int | None = None,
    ) -> Self:
        """Check how many requests *endpoint* answered (``status``, ``result``, …).

        Raises:
            ExpectationFailed: the count is outside the bounds given.
        """
        got = len(self._requests(endpoint))
        wrong = (
            (exactly is not None and got != exactly)
            or (at_least is not None and got < at_least)
            or (at_most is not None and got > at_most)
        )
        if wrong:
            bounds = {"exactly": exactly, "at least": at_least, "at most": at_most}
            wanted = ", ".join(f"{k} {v}" for k, v in bounds.items() if v is not None)
            raise self._fail(f"expected {wanted} {endpoint} requests, got {got}")
        return self

    def min_gap_s(self, seconds: float, endpoint: str = "status") -> Self:
        """Check that consecutive requests to *endpoint* were at least *seconds* apart.

        With a fake clock the gaps are virtual seconds (the code's sleeps).

        Raises:
            ExpectationFailed: two requests came closer together (both are named).
        """
        for a, b in pairwise(self._requests(endpoint)):
            gap = b.at_s - a.at_s
            if gap + 1e-9 < seconds:
                raise self._fail(
                    f"{endpoint} requests #{a.number} and #{b.number} were {gap:.1f} s apart, "
                    f"less than {seconds:g} s (bug: polling too fast, or ignoring "
                    "Retry-After / the poll hint?)"
                )
        return self

    def reason(self, reason: str) -> Self:
        """Check the outcome's reason, e.g. ``"unknown_state"`` for an ``escalated`` one.

        Raises:
            ExpectationFailed: the outcome has another reason, or none.
        """
        got = _field(self.got, "reason")
        if got is not None and str(got) == reason:
            return self
        raise self._fail(f"expected reason {reason!r}, got {got!r}")

    def honours_hints(self, endpoint: str = "status") -> Self:
        """Check that each request to *endpoint* came no sooner than the previous answer
        asked (its ``Retry-After`` or ``poll_after_seconds``, in seconds).

        Raises:
            ExpectationFailed: a request came early (the answer and the gap are named).
        """
        for a, b in pairwise(self._requests(endpoint)):
            gap = b.at_s - a.at_s
            if a.hint_s is not None and gap + 1e-9 < a.hint_s:
                raise self._fail(
                    f"{endpoint} request #{b.number} came {gap:.1f} s after #{a.number}, whose "
                    f"answer asked for {a.hint_s:g} s (bug: ignoring Retry-After / the poll "
                    "hint?)"
                )
        return self

    def result_fetched_once(self) -> Self:
        """Check that the result was fetched exactly once, after a terminal status answer.

        Raises:
            ExpectationFailed: fetched twice or more (bug: fetches the result twice), never,
                or before any status answer said the job was over (bug: any 2xx is success).
        """
        fetched = self._requests("result")
        if len(fetched) > 1:
            numbers = ", ".join(f"#{r.number}" for r in fetched)
            raise self._fail(
                f"the result was fetched {len(fetched)} times ({numbers}), expected once "
                "(bug: fetches the result twice; fetch it once, after a terminal success)"
            )
        if not fetched:
            raise self._fail("the result was never fetched, expected once")
        self._not_early(fetched[0])
        return self

    def no_result_request(self) -> Self:
        """Check that the result endpoint was never asked (e.g. after a failure).

        Raises:
            ExpectationFailed: it was.
        """
        fetched = self._requests("result")
        if fetched:
            numbers = ", ".join(f"#{r.number}" for r in fetched)
            raise self._fail(
                f"the result endpoint was asked ({numbers}), expected never: the job did not "
                "succeed (bug: any 2xx is success?)"
            )
        return self

    def _not_early(self, fetch: LoggedRequest) -> None:
        before = [r for r in self._requests("status") if r.number < fetch.number]
        if self.provider.profile is None or any(r.terminal for r in before):
            return
        last = f"#{before[-1].number} said {before[-1].state}" if before else "none was asked"
        raise self._fail(
            f"the result was fetched at #{fetch.number} before any status answer said the job "
            f"was over ({last}) (bug: any 2xx is success?)"
        )

    def meets_scenario(self) -> Self:
        """Check everything the scenario's ``expect`` block names.

        Keys: ``outcome``, ``reason``, ``job_id``, ``result_requests`` (``1`` checks
        :meth:`result_fetched_once`, ``0`` :meth:`no_result_request`), ``min_gap_s``
        (seconds), ``honours_hints`` (true: :meth:`honours_hints`), ``status_requests`` /
        ``min_status_requests`` / ``max_status_requests``.

        Raises:
            ExpectationFailed: one of them does not hold. The outcome, the reason, the job id
                and the result requests are checked first, then the hints, then the counts,
                so that the message names the most telling problem.
        """
        want = self.provider.scenario.expect
        if isinstance(kind := want.get("outcome"), str):
            self.outcome(kind)
        if isinstance(why := want.get("reason"), str):
            self.reason(why)
        if isinstance(job := want.get("job_id"), str):
            self.job_id(job)
        match want.get("result_requests"):
            case 1:
                self.result_fetched_once()
            case 0:
                self.no_result_request()
            case int(n):
                self.requests("result", exactly=n)
        if isinstance(gap := want.get("min_gap_s"), int | float):
            self.min_gap_s(float(gap))
        if want.get("honours_hints") is True:
            self.honours_hints()
        self.requests(
            "status",
            exactly=_int(want, "status_requests"),
            at_least=_int(want, "min_status_requests"),
            at_most=_int(want, "max_status_requests"),
        )
        return self


def _int(want: Mapping[str, object], key: str) -> int | None:
    value = want.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expect(outcome: OutcomeLike, provider: Provider) -> Expectation:
    """Start checking *outcome* against what *provider* saw.

    ``expect(outcome, provider).outcome("succeeded").min_gap_s(30).result_fetched_once()``;
    ``expect(outcome, provider).meets_scenario()`` checks what the scenario itself expects.

    Args:
        outcome: a :class:`~waitbound.Outcome`; an outcome word (``"succeeded"``); or a
            dict or object with ``outcome`` (and ``job_id``) fields, as a tool wrapper
            returns it.
        provider: the provider the code under test talked to (the ``provider`` fixture).

    Returns:
        An :class:`Expectation` whose checks chain.
    """
    return Expectation(outcome, provider)
