"""Two AGraph zoo models compiled jointly onto one 4-core emulated NPU (docs/agraph.md,
"Joint pipeline"): the FP32 graphs and calibration statistics come from the zoo, the joint
compiler places the engines with the cost model.  Run with the datasets prepared
(``python -m agraph prepare fashion_mnist digits``)."""
import agraph
from ratelnn.frontend.tensorflow import joint_converter

names = ["fashion_cnn_tf", "digits_cnn_tf"]
models = [agraph.load(name) for name in names]
for name in names:
    agraph.quantize(name)  # calibrated on its dataset; statistics stay in the work folder
jc = joint_converter([m.graph for m in models], [agraph.flow.converter_config(m) for m in models],
                     device_info={0: 4})
graphs_npu = jc.to_npu()
print(jc.scheme.summary())
