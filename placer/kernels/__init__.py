"""ONNX op -> torch kernels, dispatched by opset.

`bind_node(node, opset)` binds one ONNX node once; the returned `NodeFn` is then called with the
node's inputs (torch tensors, None for omitted optional inputs) on every step and returns its
outputs. `unsupported_ops` / `check_supported` report every op without a kernel before anything
runs. Modules by family: elementwise, activation, conv, pool, norm, linalg, reduce, shape, index,
generate, pad, resize, rnn, vision, quant, attention, losses, spectral, random, control (If, Loop,
Scan: their subgraphs run with these kernels), collectives (the steps of a lowered plan's layout changes).
"""

from placer.kernels import (  # noqa: F401  (importing registers the kernels)
    activation,
    attention,
    collectives,
    control,
    conv,
    elementwise,
    generate,
    index,
    linalg,
    losses,
    norm,
    pad,
    pool,
    quant,
    random,
    reduce,
    resize,
    rnn,
    shape,
    spectral,
    vision,
)
from placer.kernels.registry import (
    BoundKernel,
    Node,
    NodeFn,
    bind_node,
    check_supported,
    host_inputs,
    is_supported,
    register,
    supported_ops,
    unsupported_ops,
)

__all__ = ["BoundKernel", "Node", "NodeFn", "bind_node", "check_supported", "host_inputs",
           "is_supported", "register", "supported_ops", "unsupported_ops"]
