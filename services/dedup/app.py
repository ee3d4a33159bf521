"""App factory: `faststream run services.dedup.app:create_app --factory`."""

from __future__ import annotations

from faststream import FastStream

from services.common.runtime.root import create_service_app
from services.dedup.handlers import DEFINITION


def create_app() -> FastStream:
    return create_service_app(DEFINITION)
