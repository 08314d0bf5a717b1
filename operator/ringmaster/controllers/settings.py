"""kopf's operator-wide settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from ringmaster.controllers.outage import capped_backoffs


class NoDiffBase(kopf.DiffBaseStorage):
    """No "last handled" essence. kopf builds one for every watch event of every watched kind
    (a deep copy of the whole body, then another to strip its progress fields) so that change
    handlers (on.create/update/field) can diff against it. Ringmaster has none (event handlers
    and indexes only; tests/unit/test_kopf_settings.py keeps it so), and at thousands of pod
    events the copies were a quarter of the operator's time in the scale bench's profile."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Handler logs are not posted as Events: the controllers post their own, one per decision.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    # A watch that lost the API tries again every second at most, not up to 21 s apart: an
    # object created just after the API is back is seen within a second (outage.py).
    settings.networking.error_backoffs = capped_backoffs()
    settings.persistence.diffbase_storage = NoDiffBase()
