"""Run the ``deploy`` example from the repository.

Its one home is ``headwater.examples.deploy``::

    python examples/deploy.py --help
"""

import sys

from headwater.examples.deploy import build_agent, main
from headwater.models import DemoModel

# For `headwater run examples/deploy.py "message"` (`--model M` puts it on another model).
agent = build_agent(DemoModel())

if __name__ == "__main__":
    sys.exit(main())
