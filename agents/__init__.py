"""Agents built from jrl parts."""
