#!/usr/bin/env python3
"""Runs the binding's tests (CTest: python.binding). Exit 77 (skipped) when NumPy is missing,
1 when a test fails. FLASHATTN_LIBRARY names the library to test (CTest sets the build's). The
PyTorch tests (test_torch_*.py, test_fp8.py) are skipped, each module with the reason, when torch
cannot be imported; bench_host_overhead.py is a benchmark, not run here."""

import importlib
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/: the flashattn package

try:
    importlib.import_module("numpy")
except ImportError:
    print("skipped: NumPy is not installed for", sys.executable, "(apt-get install python3-numpy)")
    sys.exit(77)

try:
    import torch

    print(f"python {sys.version.split()[0]} ({sys.executable}), torch {torch.__version__}")
except Exception as e:  # noqa: BLE001 - the torch tests say why they are skipped
    print(f"python {sys.version.split()[0]} ({sys.executable}), no torch: {e!r}")

suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
