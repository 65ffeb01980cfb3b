"""The provider simulator: scripted HTTP answers on loopback for tests and demos.

Load a scenario file with :func:`load_scenario`, serve it with :class:`Simulator`, and
read what the client did from :meth:`Simulator.log` (credentials' values redacted).
"""

from waitbound.sim._scenario import Scenario, load_scenario, parse_scenario
from waitbound.sim._server import RequestLogEntry, Simulator, redact_headers

__all__ = [
    "RequestLogEntry",
    "Scenario",
    "Simulator",
    "load_scenario",
    "parse_scenario",
    "redact_headers",
]
