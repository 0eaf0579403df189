"""``headwater demo``: the main job on the embedded defaults."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path


def test_demo_runs_on_sqlite_and_the_scripted_model(tmp_path: Path,
                                                    child_env: dict[str, str]) -> None:
    env = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    result = subprocess.run([sys.executable, "-m", "headwater.cli", "demo"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "SCRIPTED" in out
    assert '[tool call] lookup_order({"order_id": "1042"})' in out
    assert "support> Order 1042 shipped on 30 September and is due Monday.\n" in out
    assert out.count("Order 1042 shipped") == 1  # streamed once, never rendered twice
    db = tmp_path / ".headwater" / "sessions.db"
    with sqlite3.connect(db) as raw:
        authors = [row[0] for row in raw.execute("SELECT author FROM hw_events ORDER BY seq")]
    raw.close()
    assert authors == ["user", "support", "support", "support"]
