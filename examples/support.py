"""Run the ``support`` example from the repository.

Its one home is ``headwater.examples.support``::

    python examples/support.py --help
"""

import sys

from headwater.examples.support import build_agent, main
from headwater.models import DemoModel

# For `headwater run examples/support.py "message"` (`--model M` puts it on another model).
agent = build_agent(DemoModel())

if __name__ == "__main__":
    sys.exit(main())
