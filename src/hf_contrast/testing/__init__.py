"""Test helpers shipped with the package (so the examples' tests can use them too)."""

from __future__ import annotations

from hf_contrast.testing.hub_server import HubServer, run_hub_server, use_hub_server

__all__ = ["HubServer", "run_hub_server", "use_hub_server"]
