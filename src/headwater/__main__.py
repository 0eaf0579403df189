"""``python -m headwater``: the ``headwater`` command."""

from .cli import main

raise SystemExit(main())
