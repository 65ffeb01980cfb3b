"""Pure decisions (no clock, socket or store): what an answer means, what comes next.

Layer of waitbound's source (see docs/architecture.md); private."""
