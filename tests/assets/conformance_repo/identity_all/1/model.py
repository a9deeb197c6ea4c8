"""identity_all: OUT_<T> = IN_<T> for every input present in the request."""

import triton_python_backend_utils as pb_utils

SUFFIXES = (
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for suffix in SUFFIXES:
                tensor = pb_utils.get_input_tensor_by_name(request, f"IN_{suffix}")
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(f"OUT_{suffix}", tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
