"""Text to four character statistics: length / 32, vowel, upper-case and digit fractions."""

import numpy as np
import triton_python_backend_utils as pb_utils


def features(text):
    count = max(len(text), 1)
    return [
        len(text) / 32.0,
        sum(c in "aeiouAEIOU" for c in text) / count,
        sum(c.isupper() for c in text) / count,
        sum(c.isdigit() for c in text) / count,
    ]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            rows = [features(item.decode("utf-8")) for item in text.reshape(-1)]
            out = np.array(rows, dtype=np.float32).reshape(text.shape[0], 4)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES", out)]))
        return responses
