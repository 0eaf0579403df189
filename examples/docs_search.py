"""Run the ``docs_search`` example from the repository.

Its one home is ``headwater.examples.docs_search``::

    python examples/docs_search.py --help
"""

import sys

from headwater.examples.docs_search import main

if __name__ == "__main__":
    sys.exit(main())
