"""Driving operations: the drivers, worker, fan-in, handles and delivery.

Layer of waitbound's source (see docs/architecture.md); private."""
