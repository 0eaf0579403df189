"""The gateway's HTTP error envelope, in one place.

Re-exported from :mod:`headwater.gateway.http.problems`, where the code lives.
"""

from .http.problems import (
    ERROR_LOGGED,
    ERROR_STATUS,
    ErrorBody,
    ErrorDetail,
    GatewayHTTPError,
    error_response,
    install_error_handlers,
    new_request_id,
    request_id_of,
    too_large,
    validation_message,
)

__all__ = (
    "ERROR_LOGGED",
    "ERROR_STATUS",
    "ErrorBody",
    "ErrorDetail",
    "GatewayHTTPError",
    "error_response",
    "install_error_handlers",
    "new_request_id",
    "request_id_of",
    "too_large",
    "validation_message",
)
