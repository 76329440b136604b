"""Shared paths for the kvroute Python tests."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The kvroute repository root (python/tests/ is two levels below it)."""
