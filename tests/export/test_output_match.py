"""Output comparison: exact for ints and strings, tolerance for floats."""

from __future__ import annotations

import numpy as np

from workbench.export.output_match import Tolerance, outputs_mismatch

TOL = Tolerance(rtol=1e-5, atol=1e-6)


def test_floats_match_within_tolerance_only() -> None:
    a = np.array([[1.0, 2.0]], dtype=np.float32)
    assert outputs_mismatch({"y": a}, {"y": a + 1e-7}, TOL) == ""
    assert "max abs difference" in outputs_mismatch({"y": a}, {"y": a + 1e-2}, TOL)


def test_ints_and_strings_must_be_exact() -> None:
    ints = np.array([1, 2, 3], dtype=np.int32)
    assert outputs_mismatch({"n": ints}, {"n": ints.copy()}, TOL) == ""
    assert "1 of 3 elements differ" in outputs_mismatch(
        {"n": ints}, {"n": ints + np.int32([0, 0, 1])}, TOL
    )
    text = np.array([b"ok", b"no"], dtype=np.object_)
    other = np.array([b"ok", b"NO"], dtype=np.object_)
    assert "element 1 is b'NO'" in outputs_mismatch({"s": text}, {"s": other}, TOL)


def test_shape_dtype_and_missing_outputs_are_mismatches() -> None:
    a = np.zeros((1, 2), dtype=np.float32)
    assert "shape" in outputs_mismatch({"y": a}, {"y": a.reshape(2, 1)}, TOL)
    assert "dtype" in outputs_mismatch({"y": a}, {"y": a.astype(np.float64)}, TOL)
    assert "only in one response" in outputs_mismatch({"y": a}, {}, TOL)
