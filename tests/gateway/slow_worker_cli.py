"""``python -m slow_worker_cli``: the ``headwater`` command, whose ``--workers`` processes
take ``HW_TEST_WORKER_BOOT`` seconds longer to boot.

Not a test module. uvicorn spawns its workers: each first imports the parent's main
module (as ``__mp_main__``), and only then answers its supervisor's health checks. This
main module sleeps there, as a worker starting on a busy host takes its time.
"""

from __future__ import annotations

import os
import time

if __name__ == "__mp_main__":  # a spawned worker, booting
    time.sleep(float(os.environ.get("HW_TEST_WORKER_BOOT", "0")))

from headwater.cli import main  # after the boot delay, as a worker imports it

if __name__ == "__main__":
    raise SystemExit(main())
