"""Sleeps "sleep_ms" (a config parameter) per execute(); OUTPUT0 = INPUT0.

ORDER numbers the execute() calls (0, 1, ...), so a test can see which request ran first.
A request with a "gate" parameter (a file path) waits for that file instead of sleeping: the
test decides when the execution ends, whatever the machine's load.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = int(parameters["sleep_ms"]["string_value"]) / 1000
        self.calls = 0

    def execute(self, requests):
        gate = json.loads(requests[0].parameters() or "{}").get("gate")
        if gate:
            deadline = time.monotonic() + 60
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.005)
        else:
            time.sleep(self.sleep_s)
        order = self.calls
        self.calls += 1
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            n = np.full((x.shape[0], 1), order, dtype=np.int32)
            outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("ORDER", n)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
