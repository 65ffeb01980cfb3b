"""The values: the record and its parts, outcomes, observations, audit, history.

Layer of waitbound's source (see docs/architecture.md); private."""
