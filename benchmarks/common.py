"""What the benchmark scripts share: the commit measured and a quantile."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve()


def commit() -> str:
    """The repository's short HEAD (``unknown`` outside a git checkout)."""
    try:
        done = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank; NaN for none)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
