"""kopf's operator-wide settings."""

from __future__ import annotations

import logging
from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Handler logs are not posted as Events: the controllers post their own, one per decision.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
