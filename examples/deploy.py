"""Run the ``deploy`` example from the repository.

Its one home is ``headwater.examples.deploy``::

    python examples/deploy.py --help
"""

import sys

from headwater.examples.deploy import main

if __name__ == "__main__":
    sys.exit(main())
