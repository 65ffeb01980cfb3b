"""The lowest layer: errors, time, JSON, numbers, URLs, secrets; nothing about operations.

Layer of waitbound's source (see docs/architecture.md); private."""
