"""An accumulator over a sequence: OUTPUT = sum of INPUT since the START of its sequence.

It also reports what the sequence batcher gave it: CONTROLS = [START, END, READY] as FP32,
CORRID_SEEN = the CORRID control input, ROWS = requests in this execute() call.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _control(request, name):
    return float(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        rows = np.array([[len(requests)]], dtype=np.int32)
        return [self._one(request, rows) for request in requests]

    def _one(self, request, rows):
        value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
        corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
        key = corrid.reshape(-1)[0]
        start, end, ready = (_control(request, n) for n in ("START", "END", "READY"))
        if start:
            self.totals[key] = 0
        total = self.totals.get(key, 0) + value * int(ready)
        self.totals[key] = total
        if end:
            self.totals.pop(key, None)
        outputs = [
            pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
            pb_utils.Tensor("CONTROLS", np.array([[start, end, ready]], dtype=np.float32)),
            pb_utils.Tensor("CORRID_SEEN", corrid.reshape(1, 1)),
            pb_utils.Tensor("ROWS", rows),
        ]
        return pb_utils.InferenceResponse(output_tensors=outputs)
