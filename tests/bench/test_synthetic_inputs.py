"""Request inputs made up from model metadata."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.bench.synthetic_inputs import BYTES_SAMPLE, synthesize_inputs
from workbench.errors import InvalidArgumentError

METADATA = {
    "name": "m",
    "inputs": [
        {"name": "X", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "IDS", "datatype": "INT64", "shape": [-1, 2, 3]},
        {"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]},
        {"name": "FLAG", "datatype": "BOOL", "shape": [-1, 1]},
    ],
}


def test_batching_model_gets_batch_one_and_declared_types() -> None:
    arrays = synthesize_inputs(METADATA, max_batch_size=8)
    assert arrays["X"].shape == (1, 4) and arrays["X"].dtype == np.float32
    assert arrays["IDS"].shape == (1, 2, 3) and arrays["IDS"].dtype == np.int64
    assert arrays["TEXT"].tolist() == [[BYTES_SAMPLE]]
    assert arrays["FLAG"].dtype == np.bool_


def test_non_batching_model_keeps_its_dims() -> None:
    metadata = {"inputs": [{"name": "X", "datatype": "FP16", "shape": [2, 4]}]}
    arrays = synthesize_inputs(metadata, max_batch_size=0)
    assert arrays["X"].shape == (2, 4) and arrays["X"].dtype == np.float16


def test_same_seed_same_data() -> None:
    first = synthesize_inputs(METADATA, max_batch_size=8, seed=3)
    again = synthesize_inputs(METADATA, max_batch_size=8, seed=3)
    np.testing.assert_array_equal(first["X"], again["X"])


def test_dynamic_dims_need_inputs_or_shapes() -> None:
    metadata = {"inputs": [{"name": "SEQ", "datatype": "FP32", "shape": [-1, -1, 8]}]}
    with pytest.raises(InvalidArgumentError) as raised:
        synthesize_inputs(metadata, max_batch_size=4)
    message = str(raised.value)
    assert "input 'SEQ' has dynamic dims [-1, 8]" in message
    assert "inputs={'SEQ': array}" in message and "shapes={'SEQ': [...]}" in message
    sized = synthesize_inputs(metadata, max_batch_size=4, shapes={"SEQ": [5, 8]})
    assert sized["SEQ"].shape == (1, 5, 8)
    given = np.ones((2, 3, 8), dtype=np.float32)
    assert synthesize_inputs(metadata, max_batch_size=4, inputs={"SEQ": given})["SEQ"] is not None


def test_a_hint_must_fit_the_dims() -> None:
    metadata = {"inputs": [{"name": "SEQ", "datatype": "FP32", "shape": [-1, -1, 8]}]}
    with pytest.raises(InvalidArgumentError, match=r"shape hint \[5\] for input 'SEQ'"):
        synthesize_inputs(metadata, max_batch_size=4, shapes={"SEQ": [5]})


def test_unknown_input_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"has no input\(s\) NOPE; its inputs are X"):
        synthesize_inputs(METADATA, max_batch_size=8, inputs={"NOPE": [1]})
