"""Shared by every test: the Hypothesis profiles (``tests/hypothesis_profiles.py``), the
order tests are handed to pytest-xdist's workers in (:data:`LONGEST_FIRST`), and the
tests that share one worker under ``--dist loadgroup`` (:data:`GROUPS`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.hypothesis_profiles import register

register()

LONGEST_FIRST = (
    # the end-to-end tier (real processes on real time): 8-35 s each
    "tests/e2e/test_fleet_race.py",
    "tests/e2e/test_stall.py",
    "tests/e2e/test_resume.py",
    "tests/e2e/test_serve.py::test_a_dropped_stream_resumed",
    "tests/e2e/test_mcp_http_security.py::test_idle_sockets_past_the_descriptor_limit",
    "tests/e2e/test_mcp_tasks.py::test_two_servers_on_one_postgres_store",
    "tests/e2e/test_mcp_server.py::test_every_tool_over_stdio",
    "tests/e2e/test_mcp_http_security.py::test_a_slow_request_head_is_closed",
    "tests/e2e/test_serve.py::test_watch_sees_every_event_of_a_wait_in_order",
    "tests/e2e/test_mcp_tasks.py::test_a_restarted_server",
    "tests/e2e/test_crash.py",
    "tests/e2e/test_smoke.py",
    "tests/e2e/test_mcp_tasks.py::test_input_required",
    "tests/e2e/test_telemetry.py",
    "tests/e2e/test_mcp_http_security.py::test_sessions_are_capped",
    "tests/e2e/test_push_path.py::test_a_worker_killed_between_an_outcome_and_its_delivery",
    "tests/e2e/test_groups_cli.py::test_wait_all_killed_after_a_reservation",
    # the other tier: 3-15 s each
    "tests/testing/test_docs_example.py::test_the_docs_example_passes_under_xdist",
    "tests/core/test_fuzz_answers.py",
    "tests/cli/test_cli_hardening.py::test_interrupt_saves_the_operation",
    "tests/agent/test_answers.py::test_an_answer_never_exceeds_its_bound",
    "tests/web/test_app.py::test_no_last_event_id_or_since_gives_a_5xx",
    "tests/agent/test_mcp_tools.py::test_ceiling_returns_the_job",
    "tests/web/test_webhooks_verify.py::test_no_garbage_raises_anything_but_a_rejection",
    "tests/transports/test_clients.py::test_shared_client_survives_failed_calls",
    "tests/core/test_oracle.py",
)
"""Node-id prefixes of the longest tests, longest first (seconds measured on a quiet
2-core machine). pytest-xdist hands tests out in collection order, so these start
first, spread over the workers, and the run does not end waiting on one long test a
worker drew last. Every other test keeps its place after them; the order is the same
in every worker (xdist requires that), whatever the machine's speed."""

GROUPS = {
    "tests/browser/test_inbox.py::": "browser-inbox",
    "tests/browser/test_cross_port.py::": "browser-cross-port",
    "tests/e2e/test_provider_kit.py::": "provider-kit",
    "tests/e2e/test_provider_kit_azure.py::": "provider-kit-azure",
    "tests/e2e/test_mcp_conformance.py::": "mcp-conformance",
    "tests/e2e/test_push_path.py::test_a_bad_delivery_or_token_is_refused": "push-guarded",
    "tests/e2e/test_push_path.py::test_a_replayed_delivery_is_acknowledged": "push-guarded",
}
"""Node-id prefixes of tests that share a costly module-scoped fixture (Chromium, the
provider kit's app under uvicorn, the MCP conformance server, the push path's guarded
service), and the group each is run in: under ``--dist loadgroup`` (the end-to-end
tier) a group goes to one worker, so its fixture starts once, not in every worker
that drew one of its tests; the groups are handed out first, the largest first.
(pytest-xdist's own ``xdist_group`` mark sets a node id that pytest 9 no longer reads,
so the groups are named here, by node id, as the controller sees them.)"""


def _rank(nodeid: str) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def _group(nodeid: str) -> str | None:
    return next((name for prefix, name in GROUPS.items() if nodeid.startswith(prefix)), None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: pytest-xdist's scheduling by scope, each test its
    own scope but for :data:`GROUPS`; any other ``--dist``: xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    return Grouped(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests :data:`LONGEST_FIRST` names to the front, in its order (a stable
    sort: the rest keep collection order)."""
    items.sort(key=lambda item: _rank(item.nodeid))
