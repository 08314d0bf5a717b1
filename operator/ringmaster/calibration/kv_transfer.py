"""The prefill -> decode KV transfer (engine.llm_disaggregation) beside published transfers
(``kv_transfer_points.yaml`` next to this module, with its source): the fit of its two constants
and the rows of the accuracy table.

The model is ``latency + bytes / (efficiency x line rate)``. Both constants are fitted, by least
squares on the relative error, on the rows marked fitted; no published transfer is held out yet,
so ``ringmaster calibrate`` shows fitted rows only and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ringmaster.calibration.points import CHECKED, FITTED, Row, load_points, relative_error
from ringmaster.engine.llm_disaggregation import transfer_seconds

KV_TRANSFER_POINTS = Path(__file__).resolve().parent / "kv_transfer_points.yaml"
KV_TRANSFER_MODEL = "kv transfer"
TOLERANCE = 0.15


class TransferFit(NamedTuple):
    latency_seconds: float
    efficiency: float


def _bytes_and_seconds(
    data: dict[str, Any], status: str
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    rows = [r for r in data["transfers"] if r["status"] == status]
    per_token = float(data["kv_bytes_per_token"])
    nbytes = np.array([float(r["prompt_tokens"]) * per_token for r in rows])
    seconds = np.array([float(r["published_ms"]) * 1e-3 for r in rows])
    return nbytes, seconds, rows


def fit_transfer(data: dict[str, Any] | None = None) -> TransferFit:
    """Latency and efficiency minimising the squared relative error over the fitted rows."""
    data = data if data is not None else load_points(KV_TRANSFER_POINTS)
    nbytes, seconds, _ = _bytes_and_seconds(data, FITTED)
    rate = float(data["line_rate_GBps"]) * 1e9
    design = np.stack([1.0 / seconds, nbytes / seconds], axis=1)
    (latency, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return TransferFit(float(latency), float(1.0 / (per_byte * rate)))


def kv_transfer_rows(data: dict[str, Any] | None = None) -> list[Row]:
    data = data if data is not None else load_points(KV_TRANSFER_POINTS)
    rate = float(data["line_rate_GBps"]) * 1e9
    out: list[Row] = []
    for status in (FITTED, CHECKED):
        nbytes, seconds, rows = _bytes_and_seconds(data, status)
        for row, b, t in zip(rows, nbytes, seconds, strict=True):
            predicted = float(transfer_seconds(b, rate)) * 1e3
            out.append(
                Row(
                    row["id"],
                    "KV transfer ms",
                    t * 1e3,
                    predicted,
                    relative_error(predicted, t * 1e3),
                    TOLERANCE,
                    status,
                    "prefill -> decode KV transfer model",
                    model=KV_TRANSFER_MODEL,
                )
            )
    return out
