"""Telemetry: logs, metrics and traces of what the engine saved.

Layer of waitbound's source (see docs/architecture.md); private."""
