"""The push notification config methods (README, A2A)."""

from __future__ import annotations

from typing import Any

METHODS: dict[str, Any] = {}
