"""Run the ``support`` example from the repository.

Its one home is ``headwater.examples.support``::

    python examples/support.py --help
"""

import sys

from headwater.examples.support import main

if __name__ == "__main__":
    sys.exit(main())
