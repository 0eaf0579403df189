"""``python -m headwater.cli``: the ``headwater`` command."""

from . import main

raise SystemExit(main())
