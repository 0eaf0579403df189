"""Bounds on connections, before any request: a deadline for the request head and a cap.

Re-exported from :mod:`headwater.gateway.http.connections`, where the code lives.
"""

from .http.connections import BUSY, BoundedH11Protocol, http_protocol

__all__ = ("BUSY", "BoundedH11Protocol", "http_protocol")
