"""A shim for tools that still run `python setup.py ...` or look for this file: everything setuptools needs
(metadata, dependencies, entry points, package data) is in pyproject.toml, which setup() reads."""

from setuptools import setup

setup()
