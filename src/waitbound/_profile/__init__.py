"""A provider's contract, its protocol, the policy and the schedule formula.

Layer of waitbound's source (see docs/architecture.md); private."""
