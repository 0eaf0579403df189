"""The bottom layer: what every other part of headwater stands on.

It owns the content types (``types``) and the generation settings under genai's
names (``genai``), the exception tree and the one registry of
error codes (``errors``), every bound as a setting (``settings``), real or virtual
time (``clock``), the ``Event`` contract (``events``), per-run settings
(``run_config``), session state (``state``), what callbacks see (``context``),
what a client pushes into a live run (``live_request_queue``), the one
Server-Sent Events codec (``sse``), the OpenTelemetry spans (``telemetry``) and
``TaskSet``, the one owner of tasks outside a task group (``tasks``). It may
import only itself, the standard library and third-party libraries — never
another part of headwater. Library code imports these modules from here
(``headwater.core.types``); the modules of the same names at the package root
(``headwater.types``) are the public paths and re-export them.
"""
