"""``GET /runs/{run_id}/trace``: a run's trace for the run inspector (docs/inspector.md).

The spans the run recorded (:mod:`headwater.core.inspection`), kept by the
gateway's :class:`~.runs.traces.TraceStore` for the last ``Settings.inspect_runs``
runs of each session; answered to the run's owner only, with the rules of every
other run route (404 for another user's run or an unknown one).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from .core import NOT_FOUND_RUN, CurrentUser, GatewayDep
from .http.problems import ErrorBody, GatewayHTTPError

router = APIRouter(tags=["runs"])
"""The trace route."""


@router.get("/runs/{run_id}/trace", response_class=JSONResponse,
            responses={404: {"model": ErrorBody}})
async def get_trace(gw: GatewayDep, user: CurrentUser, run_id: str,
                    payloads: Annotated[bool, Query()] = False) -> JSONResponse:
    """The run's spans, times in seconds since its start; ``payloads=1`` adds what each
    model call was sent and answered and each tool call's arguments and result, when
    ``Settings.inspect_payloads`` recorded them. 404 for another user's run, an unknown
    one, or one whose trace is no longer kept (``inspect_runs``)."""
    trace = await gw.traces.get(run_id, user, payloads=payloads)
    if trace is None:
        raise GatewayHTTPError("not_found", NOT_FOUND_RUN)
    return JSONResponse(trace)
