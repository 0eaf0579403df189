"""Run the ``indexer`` example from the repository (needs ``pip install "headwater[mcp]"``).

Its one home is ``headwater.examples.indexer``; its tools come from the MCP server
``headwater.examples.index_server``::

    python examples/indexer.py --help
"""

import sys

from headwater.examples.indexer import build_agent, main
from headwater.models import DemoModel

# For `headwater run examples/indexer.py "Index the docs"` (and `headwater mcp`).
agent = build_agent(DemoModel())

if __name__ == "__main__":
    sys.exit(main())
