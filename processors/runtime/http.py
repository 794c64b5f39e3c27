"""The HTTP client of backends that call an OpenAI-compatible endpoint (embed, prompt)."""

from __future__ import annotations

import httpx


def json_client(api_key: str, timeout_s: float) -> httpx.AsyncClient:
    """One pooled client per backend: JSON in and out, a bearer token only when there is a key."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.AsyncClient(headers=headers, timeout=timeout_s)
