import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            last = pb_utils.get_input_tensor_by_name(request, "LAST_WITH_DATA").as_numpy()[0]
            sender = request.get_response_sender()
            if count < 0:
                error = pb_utils.TritonError("negative count")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                flags = FINAL if last and i == count - 1 else 0
                sender.send(pb_utils.InferenceResponse([out]), flags=flags)
            if not last or count == 0:
                sender.send(flags=FINAL)
        return None
