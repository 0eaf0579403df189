"""Run the ``research`` example from the repository.

Its one home is ``headwater.examples.research``::

    python examples/research.py --help
"""

import sys

from headwater.examples.research import build_agent, main
from headwater.models import DemoModel

# For `headwater run examples/research.py "message"`: the root is a SequentialAgent.
root_agent = build_agent(DemoModel())

if __name__ == "__main__":
    sys.exit(main())
