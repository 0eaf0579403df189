"""Run the ``research`` example from the repository.

Its one home is ``headwater.examples.research``::

    python examples/research.py --help
"""

import sys

from headwater.examples.research import main

if __name__ == "__main__":
    sys.exit(main())
