"""A record changes one way (whole parts), each part through its own constructor, and the
engine reads and writes a record by its parts.

The source checks read the modules' syntax (no import): the engine's own transitions
(``waitbound._rules``, ``waitbound._engine``) name the part of every field they read,
and every ``<part>.evolve(...)`` names only fields of that part.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from waitbound import Policy, Record, parse_profile
from waitbound._base._json import canonical_json
from waitbound._model._record import FIELD_NAMES, PLACES, Contract, Lease, Schedule, Submission
from waitbound._model._record_parts import COUNTERS, PARTS, Counters, Oversight, Part, Push

ROOT = Path(__file__).resolve().parents[2] / "src" / "waitbound"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
RECORD = Record(
    contract=Contract(
        operation_id="op-p",
        profile=parse_profile({"state": "status", "pending": ["running"], "succeeded": ["done"]}),
        policy=Policy(),
        created_at=T0,
    ),
    submission=Submission(status_url="https://api.example/jobs/1"),
    schedule=Schedule(deadline_at=T0 + timedelta(minutes=10), next_poll_at=T0),
)
PART_FIELDS: dict[str, tuple[str, ...]] = {
    attr: tuple(item.name for item in dataclasses.fields(kind))  # type: ignore[arg-type]
    for attr, kind in PARTS
}
FLAT = {name: attr for attr, names in PART_FIELDS.items() if attr != "push" for name in names}
"""Each field of each part (read-only on a record by its own name): its part."""


# -- one way to change a record -------------------------------------------------------


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(changed=st.sets(st.sampled_from([attr for attr, _ in PARTS])), version=st.integers(0, 9))
def test_evolve_replaces_the_parts_it_names_and_shares_the_others(
    changed: set[str], version: int
) -> None:
    new_parts = {attr: getattr(RECORD, attr).evolve() for attr in changed}
    got = RECORD.evolve(**new_parts, version=version)
    assert type(got) is Record
    assert got.version == version
    for attr, _ in PARTS:
        want = new_parts[attr] if attr in changed else getattr(RECORD, attr)
        assert getattr(got, attr) is want, attr
    assert got == dataclasses.replace(RECORD, **new_parts, version=version)


def test_evolve_and_the_constructor_take_parts_only() -> None:
    with pytest.raises(TypeError, match="next_poll_at"):
        RECORD.evolve(next_poll_at=T0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="next_poll_at"):
        Record(next_poll_at=T0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="next_poll_at"):
        dataclasses.replace(RECORD, next_poll_at=T0)  # type: ignore[call-arg]
    assert get_type_hints(Record) == {**dict(PARTS), "version": int}


def test_a_record_built_by_its_constructor_starts_with_empty_parts() -> None:
    assert RECORD.version == 0
    for attr, kind in PARTS:
        if attr not in ("contract", "submission", "schedule"):
            assert getattr(RECORD, attr) == kind()


def test_flat_names_are_read_only_views_of_the_parts() -> None:
    assert RECORD.next_poll_at is RECORD.schedule.next_poll_at
    assert RECORD.operation_id == "op-p"
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECORD.next_poll_at = T0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECORD.schedule = RECORD.schedule  # type: ignore[misc]
    for name, attr in FLAT.items():
        assert getattr(RECORD, name) is getattr(getattr(RECORD, attr), name), name


# -- each part through its own constructor --------------------------------------------


class _Seen(Exception):
    pass


def test_part_evolve_runs_the_constructor_and_encodes_afresh() -> None:
    schedule = RECORD.schedule
    before = schedule.stored()
    moved = schedule.evolve(next_poll_at=T0 + timedelta(seconds=5), attempt=2)
    assert moved == dataclasses.replace(schedule, next_poll_at=T0 + timedelta(seconds=5), attempt=2)
    assert moved.stored()["next_poll_at"] == (T0 + timedelta(seconds=5)).isoformat()
    assert schedule.stored() is before  # the old part keeps its own encoding
    with pytest.raises(TypeError, match="no_such_field"):
        schedule.evolve(no_such_field=1)

    class Watched(Counters):  # a subclass whose constructor says it ran
        def __init__(self, **values: Any) -> None:
            raise _Seen

    watched = object.__new__(Watched)
    for item in dataclasses.fields(Counters):
        object.__setattr__(watched, item.name, 0)
    with pytest.raises(_Seen):
        watched.evolve(attempt=1)


@pytest.mark.parametrize("kind", sorted(COUNTERS))
def test_counters_count_a_request_of_each_kind(kind: str) -> None:
    counters = Counters()
    more = counters.with_request(kind, 3)  # type: ignore[arg-type]
    assert more.used(kind) == 3  # type: ignore[arg-type]
    assert getattr(more, COUNTERS[kind]) == 3  # type: ignore[index]
    assert more.without_request(kind).used(kind) == 2  # type: ignore[arg-type]
    assert counters.without_request(kind) == counters  # type: ignore[arg-type]
    assert counters.with_request(kind, 0) is counters  # type: ignore[arg-type]


def test_lease_transitions() -> None:
    until = T0 + timedelta(seconds=30)
    reserved = Lease.reserved("status", "w1", until)
    assert reserved == Lease(in_flight="status", lease_owner="w1", lease_expires_at=until)
    assert reserved.released() == Lease()
    assert reserved.held("w2", T0) == Lease(
        in_flight="status", lease_owner="w2", lease_expires_at=T0
    )
    assert reserved.lapsed(T0) == Lease(in_flight="status", lease_owner="w1", lease_expires_at=T0)


def test_a_requested_cancel_forgets_the_last_cancels_answer() -> None:
    answered = Oversight(cancel_refused_at=T0, cancel_refused="no", cancel_accepted_at=T0)
    asked = answered.cancel_requested(T0, "ops", "too slow")
    assert asked == Oversight(
        cancel_due=True, cancel_requested_at=T0, cancel_requested_by="ops", cancel_reason="too slow"
    )


# -- the flat stored JSON stays as it was ----------------------------------------------


def test_field_names_name_every_field_of_every_part_once() -> None:
    """The flat JSON's keys: each part's fields, ``push`` and ``version``, each once."""
    assert len(FIELD_NAMES) == len(set(FIELD_NAMES))
    assert set(FIELD_NAMES) == {*FLAT, "push", "version"}
    assert set(PLACES) == {*FLAT, "push"}


def test_the_flat_json_reads_back_to_the_same_record_and_text() -> None:
    record = RECORD.evolve(
        counters=RECORD.counters.with_request("status"),
        push=Push(webhook="reports", deliveries=2, last_delivery_at=T0),
        oversight=RECORD.oversight.cancel_requested(T0, "ops", None),
        version=4,
    )
    data = record.to_json()
    assert list(data) == ["schema", *FIELD_NAMES]
    back = Record.from_json(json.loads(canonical_json(data)))
    assert back == record
    assert canonical_json(back.to_json()) == canonical_json(data)


# -- the engine reads and writes parts by name (source checks) -------------------------

RECORD_NAMES = frozenset(
    {
        "record",
        "before",
        "after",
        "current",
        "base",
        "released",
        "cleared",
        "reserved",
        "existing",
        "fresh",
        "due",
        "counted",
        "done",
        "closed",
    }
)
"""Names that hold a record in the engine's modules (besides any parameter or variable
annotated ``Record``, and any ``<something>.record``)."""


def _annotated_records(tree: ast.AST) -> set[str]:
    """Names annotated as a record (``x: Record``, ``x: Record | None``) in *tree*."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            target, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, annotation = node.target.id, node.annotation
        else:
            continue
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = ast.parse(annotation.value, mode="eval").body
        if any(isinstance(n, ast.Name) and n.id == "Record" for n in ast.walk(annotation)):
            names.add(target)
    return names


def _holds_a_record(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "record"


def _engine_modules() -> list[Path]:
    return sorted([*(ROOT / "_rules").rglob("*.py"), *(ROOT / "_engine").rglob("*.py")])


def _flat_reads(tree: ast.AST) -> list[ast.Attribute]:
    """The flat reads in *tree*: a part's field read on a name that holds a record."""
    names = set(RECORD_NAMES) | _annotated_records(tree)
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in FLAT
        and _holds_a_record(node.value, names)
    ]


def test_the_engine_reads_a_record_by_its_parts() -> None:
    """No module of ``_rules`` or ``_engine`` reads ``record.next_poll_at``: it reads
    ``record.schedule.next_poll_at`` (the flat names are for people reading records)."""
    assert len(_engine_modules()) > 20
    found = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)} "
        f"(read {FLAT[node.attr]}.{node.attr})"
        for path in _engine_modules()
        for node in _flat_reads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_the_source_check_finds_a_flat_read() -> None:
    """The check above is not vacuous: a flat read on a record-holding name is found."""
    source = (
        "def f(step, record: Record, later: 'Record | None') -> None:\n"
        "    record.next_poll_at\n"
        "    step.record.phase\n"
        "    later.attempt\n"
        "    record.schedule.next_poll_at\n"
        "    step.phase\n"
    )
    reads = [ast.unparse(node) for node in _flat_reads(ast.parse(source))]
    assert sorted(reads) == ["later.attempt", "record.next_poll_at", "step.record.phase"]


def _part_evolves(path: Path) -> list[tuple[int, str, set[str]]]:
    """Each ``<x>.<part>.evolve(name=...)`` in *path*: its line, part and names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "evolve"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in PART_FIELDS
        ):
            names = {kw.arg for kw in node.keywords if kw.arg is not None}
            found.append((node.lineno, node.func.value.attr, names))
    return found


def test_every_part_evolve_names_fields_of_that_part() -> None:
    """``record.schedule.evolve(next_poll_at=...)`` is checked when it runs; this finds a
    field given to the wrong part without running it (``Part.evolve`` takes any name)."""
    wrong = []
    calls = 0
    for path in sorted(ROOT.rglob("*.py")):
        for line, part, names in _part_evolves(path):
            calls += 1
            if extra := names - set(PART_FIELDS[part]):
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {part} has no {extra}")
    assert calls > 50
    assert wrong == []


def test_no_record_is_changed_by_dataclasses_replace() -> None:
    """``replace(record, ...)`` would be a second way: the engine and the rules call
    ``record.evolve`` (a part may still be given to ``replace``, but none is)."""
    found = []
    for path in _engine_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set(RECORD_NAMES) | _annotated_records(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
                == "replace"
                and node.args
                and (
                    _holds_a_record(node.args[0], names)
                    or (
                        isinstance(node.args[0], ast.Attribute) and node.args[0].attr in PART_FIELDS
                    )
                )
            ):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert found == []


def test_every_part_is_a_part() -> None:
    assert all(issubclass(kind, Part) for _, kind in PARTS)
