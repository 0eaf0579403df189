"""Seed 002's "Streaming tools" example (Python), as the seed writes it.

Only the imports and the model are adapted: headwater's ``Agent`` and
``FunctionTool`` for ADK's, ``collections.abc.AsyncGenerator`` for
``typing.AsyncGenerator``, and a scripted model for ``"gemini-flash-latest"``
(tests/examples/test_seed_002.py runs the agent on its own model). The seed's
``monitor_video_stream`` is left out: its body reads the queue's private
``_queue`` and calls Google's ``Client`` itself, beyond imports and the model.
The seed's two-space indentation is kept.
"""

# ruff: noqa: E501  (the seed's own line)

import asyncio
from collections.abc import AsyncGenerator

from headwater import Agent, FunctionTool


async def monitor_stock_price(stock_symbol: str) -> AsyncGenerator[str, None]:
  """This function will monitor the price for the given stock_symbol in a continuous, streaming and asynchronously way."""
  print(f"Start monitor stock price for {stock_symbol}!")

  # Let's mock stock price change.
  await asyncio.sleep(4)
  price_alert1 = f"the price for {stock_symbol} is 300"
  yield price_alert1
  print(price_alert1)

  await asyncio.sleep(4)
  price_alert1 = f"the price for {stock_symbol} is 400"
  yield price_alert1
  print(price_alert1)

  await asyncio.sleep(20)
  price_alert1 = f"the price for {stock_symbol} is 900"
  yield price_alert1
  print(price_alert1)

  await asyncio.sleep(20)
  price_alert1 = f"the price for {stock_symbol} is 500"
  yield price_alert1
  print(price_alert1)


# Use this exact function to help ADK stop your streaming tools when requested.
# for example, if we want to stop `monitor_stock_price`, then the agent will
# invoke this function with stop_streaming(function_name=monitor_stock_price).
def stop_streaming(function_name: str):
  """Stop the streaming

  Args:
    function_name: The name of the streaming function to stop.
  """
  pass


root_agent = Agent(
    model="scripted:gemini-flash-latest",
    name="video_streaming_agent",
    instruction="""
      You are a monitoring agent. You can do video monitoring and stock price monitoring
      using the provided tools/functions.
      When users want to monitor a video stream,
      You can use monitor_video_stream function to do that. When monitor_video_stream
      returns the alert, you should tell the users.
      When users want to monitor a stock price, you can use monitor_stock_price.
      Don't ask too many questions. Don't be too talkative.
    """,
    tools=[
        monitor_stock_price,
        FunctionTool(stop_streaming),
    ]
)
