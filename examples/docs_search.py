"""Run the ``docs_search`` example from the repository.

Its one home is ``headwater.examples.docs_search``::

    python examples/docs_search.py --help
"""

import sys

from headwater.examples.docs_search import build_agent, main
from headwater.models import DemoModel

# For `headwater run examples/docs_search.py "message"` (`--model M` puts it on another model).
agent = build_agent(DemoModel())

if __name__ == "__main__":
    sys.exit(main())
