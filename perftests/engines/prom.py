"""Read counters from a Prometheus text exposition (`/metrics`).

Matched by sample name only: label order, HELP/TYPE lines and the content-type version differ
between prometheus_client releases (vLLM 0.34.0 serves whatever its dependency prints), and the
`_created` companions of counters are different names, so they never mix in."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def counter_sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each named sample summed over its label sets (engines, models); absent names are left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in names:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out
