"""Credentials echoed back by a provider never reach the record, the audit log or the outcome."""

from __future__ import annotations

import json

from waitbound import MemoryStore, Operation, Policy, parse_profile, wait
from waitbound._base._secrets import credential_values, is_credential, redact_bytes, secret_parts
from waitbound.sim import Simulator, parse_scenario

TOKEN = "tok-5f0e9a1b2c"


def test_secret_parts_are_whole_values_and_long_parts_longest_first() -> None:
    assert secret_parts([f"Bearer {TOKEN}", "2", "x/y"]) == (f"Bearer {TOKEN}", TOKEN)
    assert secret_parts(["short", "Bas abc"]) == ()  # under 8 characters: ordinary text


def test_redact_bytes_replaces_every_occurrence() -> None:
    body = f'{{"a": "{TOKEN}", "b": ["Bearer {TOKEN}"]}}'.encode()
    redacted = redact_bytes(body, secret_parts([f"Bearer {TOKEN}"]))
    assert json.loads(redacted) == {"a": "[redacted]", "b": ["[redacted]"]}


def test_an_echoed_credential_is_redacted_before_anything_is_stored() -> None:
    echo = {"seen_authorization": f"Bearer {TOKEN}", "token": TOKEN}
    scenario = parse_scenario(
        {
            "id": "echo",
            "endpoints": {
                "status": [
                    {"code": 200, "body": {"status": "running", "debug": echo}},
                    {"code": 200, "body": {"status": "done", "output": echo, "state_note": TOKEN}},
                ]
            },
        }
    )
    profile = parse_profile(
        {
            "state": "status",
            "pending": ["running"],
            "succeeded": ["done"],
            "result": "output",
            "progress": "debug",
        },
        name="echo",
    )
    store = MemoryStore()
    with Simulator(scenario) as sim:
        outcome = wait(
            Operation(
                status_url=f"{sim.base_url}/status",
                profile=profile,
                policy=Policy(base_delay_s=0.05, min_delay_s=0.01, deadline_s=10),
            ),
            store=store,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert outcome.result == {"seen_authorization": "[redacted]", "token": "[redacted]"}
    record = store.get(outcome.operation_id)
    assert record is not None
    stored = json.dumps(record.to_json()) + json.dumps(
        [[e.event.summary, dict(e.event.data)] for e in store.audit(outcome.operation_id)]
    )
    assert TOKEN not in stored
    assert "[redacted]" in stored


def test_only_credential_headers_are_secrets() -> None:
    """An Api-Version header's value is no secret: a Location that carries it is polled
    as the provider gave it, not rewritten to `[redacted]`; an Authorization token and an
    X-Api-Key are secrets, Idempotency-Key is not."""
    headers = {
        "Authorization": "Bearer tok-1234567890",
        "X-Api-Key": "key-abcdefgh",
        "Api-Version": "2024-01-01",
        "Idempotency-Key": "wb-0123456789",
    }
    assert [name for name in headers if is_credential(name)] == ["Authorization", "X-Api-Key"]
    assert set(credential_values(headers)) == {
        "Bearer tok-1234567890",
        "tok-1234567890",
        "key-abcdefgh",
    }
