"""Runners: execution strategies for a loop (anakin: fully on device)."""
