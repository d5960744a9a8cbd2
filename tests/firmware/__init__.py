"""Tests of the firmware package."""
