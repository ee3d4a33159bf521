"""The image's HEALTHCHECK: the container is healthy when the service it runs answers `/healthz`,
on the recall API's port (TIERMEM_HTTP_PORT) or a consumer's health port (TIERMEM_HEALTH_PORT).
Standard library only: it runs every 30 s and must start fast."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def healthy(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main() -> int:
    ports = [os.environ.get(name) for name in ("TIERMEM_HEALTH_PORT", "TIERMEM_HTTP_PORT")]
    return 0 if any(port and healthy(port) for port in ports) else 1


if __name__ == "__main__":
    sys.exit(main())
