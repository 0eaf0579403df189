"""How one run behaves: streaming mode and budgets (docs/event-contract.md).

Re-exported from :mod:`headwater.core.run_config`, where the code lives.
"""

from .core.run_config import RunConfig, StreamingMode

__all__ = ("RunConfig", "StreamingMode")
