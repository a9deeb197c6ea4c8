"""An accumulator keyed by request.correlation_id(), which is a str for string sequence ids.

CORRID_SEEN is "<type>:<id>" so that a test sees whether the id arrived as int or str.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
        start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]
        ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy().reshape(-1)[0]
        corrid = request.correlation_id()
        if start:
            self.totals[corrid] = 0
        total = self.totals.get(corrid, 0) + value * int(ready)
        self.totals[corrid] = total
        seen = f"{type(corrid).__name__}:{corrid}".encode()
        outputs = [
            pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
            pb_utils.Tensor("CORRID_SEEN", np.array([[seen]], dtype=np.object_)),
        ]
        return pb_utils.InferenceResponse(output_tensors=outputs)
