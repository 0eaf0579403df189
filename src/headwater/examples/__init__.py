"""The example agents, each defined once and runnable on its own.

Each module exposes ``build_agent(model)`` (the agent ``headwater demo``
serves) and ``main(argv)`` (``python -m headwater.examples.<name> ["message"]``,
or ``python examples/<name>.py`` from the repository). Run on their own they
use the offline :class:`~headwater.models.demo.DemoModel` unless
``HEADWATER_MODEL`` names another model.

- :mod:`~headwater.examples.support`: a shop's support agent (``lookup_order``).
- :mod:`~headwater.examples.docs_search`: a docs search that reports progress.
- :mod:`~headwater.examples.deploy`: a deploy behind an approval gate, with a progress bar.
- :mod:`~headwater.examples.price_watcher`: a live tool that watches a stock (seed 000).
- :mod:`~headwater.examples.people_counter`: a live tool that counts people in the
  session's own camera frames (seed 002).
- :mod:`~headwater.examples.research`: several agents on one stream — two searchers
  in parallel (``output_key``), a writer that reads their notes and checks one
  with an agent used as a tool (``AgentTool``). ``build_agent`` returns the
  pipeline, a ``SequentialAgent``.
"""
