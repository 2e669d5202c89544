"""Names of the annotations `placer apply` writes, shared by the writer and the reader."""

# Per node (NodeProto.metadata_props): the exact device string, e.g. "cuda:0" or "cpu:1".
DEVICE_KEY = "placer.device"
# Per node: ONNX Runtime's layer annotation, matched by `session.layer_assignment_settings`.
# Its value is the device kind ("cpu", "cuda"): ORT runs one execution provider per kind.
LAYER_KEY = "layer_ann"
# Per node of a plan whose layouts its sharding specs cannot say (a `Partial()`, which ONNX has no
# word for): JSON {"inputs": [...], "outputs": [...]} of layouts, e.g. "Partial()" (`placer.plans`).
LAYOUT_KEY = "placer.layout"
# Name of the DeviceConfigurationProto (ModelProto.configuration) that lists the devices.
CONFIG_NAME = "placer"
# Per model (ModelProto.metadata_props).
FORMAT_KEY = "placer.placement.format"
GRAPH_SHA_KEY = "placer.graph.sha256"
MEASUREMENT_KEY = "placer.placement.measurement"   # JSON, when the placement carried one
PLAN_EXTRA_KEY = "placer.plan.extra"   # JSON: a plan's other fields (its name, ...), when it has any

# IR 10 added NodeProto.metadata_props; IR 11 the multi-device configuration protos.
MIN_IR_VERSION = 11
