"""Logits to a label (argmax) and its softmax probability."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.labels = config["parameters"]["labels"]["string_value"].split(",")

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = shifted / shifted.sum(axis=1, keepdims=True)
            best = probs.argmax(axis=1)
            labels = np.array([self.labels[i].encode() for i in best], dtype=np.object_)
            score = probs[np.arange(len(best)), best].astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("LABEL", labels.reshape(-1, 1)),
                        pb_utils.Tensor("SCORE", score.reshape(-1, 1)),
                    ]
                )
            )
        return responses
