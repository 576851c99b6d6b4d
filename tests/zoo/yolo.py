"""mindyolo's YOLOv8-n as a user names it to amptool (``tests/zoo/yolo.py:yolov8n``), a
loss of the user's for it, and a small synthetic detection task.

mindyolo 0.5.0's wheel ships no configs: ``NETWORK`` is the ``network`` section of its
published ``configs/yolov8/yolov8n.yaml`` (YOLOv8.0n backbone and head, depth 0.33, width
0.25, strides 8/16/32, reg_max 16), given to mindyolo's own ``create_model``."""
from __future__ import annotations

import numpy as np

NETWORK = {
    "model_name": "yolov8", "nc": 80, "reg_max": 16,
    "depth_multiple": 0.33, "width_multiple": 0.25, "stride": [8, 16, 32],
    "backbone": [
        [-1, 1, "ConvNormAct", [64, 3, 2]], [-1, 1, "ConvNormAct", [128, 3, 2]],
        [-1, 3, "C2f", [128, True]], [-1, 1, "ConvNormAct", [256, 3, 2]],
        [-1, 6, "C2f", [256, True]], [-1, 1, "ConvNormAct", [512, 3, 2]],
        [-1, 6, "C2f", [512, True]], [-1, 1, "ConvNormAct", [1024, 3, 2]],
        [-1, 3, "C2f", [1024, True]], [-1, 1, "SPPF", [1024, 5]],
    ],
    "head": [
        [-1, 1, "Upsample", [None, 2, "nearest"]], [[-1, 6], 1, "Concat", [1]],
        [-1, 3, "C2f", [512]],
        [-1, 1, "Upsample", [None, 2, "nearest"]], [[-1, 4], 1, "Concat", [1]],
        [-1, 3, "C2f", [256]],
        [-1, 1, "ConvNormAct", [256, 3, 2]], [[-1, 12], 1, "Concat", [1]],
        [-1, 3, "C2f", [512]],
        [-1, 1, "ConvNormAct", [512, 3, 2]], [[-1, 9], 1, "Concat", [1]],
        [-1, 3, "C2f", [1024]],
        [[15, 18, 21], 1, "YOLOv8Head", ["nc", "reg_max", "stride"]],
    ],
}
SIZE = 64
"""Input height and width: feature maps of 8x8, 4x4 and 2x2 cells."""
CLASSES = 3
REG_MAX = 16


def yolov8n(num_classes: int = CLASSES):
    """In training mode the three raw head maps (N, 64 + classes, h, w); in inference mode
    (decoded boxes and class scores (N, 84, 4 + classes), those three maps)."""
    from mindyolo.models.model_factory import create_model
    from mindyolo.utils.config import Config

    return create_model(model_name="yolov8", model_cfg=Config(NETWORK), num_classes=num_classes)


yolov8n.input_shape = (3, SIZE, SIZE)


def centre_loss():
    """Binary cross-entropy of the stride-8 map's class scores against the cell holding each
    object's centre. It takes ``*outputs``: the step hands it the training maps, the held-out
    split the inference outputs (boxes first), and the maps are the last three of either."""
    from mindspore import nn

    bce = nn.BCEWithLogitsLoss()

    def loss(*args):
        p3, heat = args[-4], args[-1]
        return bce(p3[:, 4 * REG_MAX:], heat)
    return loss


centre_loss.targets = ["heat"]


def detection_task(n: int, seed: int = 0) -> dict:
    """``x``: n images (3, 64, 64) in [0, 1], each a noisy dark background with one bright
    rectangle whose colour channel is its class; ``heat``: (n, classes, 8, 8), 1 at the
    stride-8 cell of the rectangle's centre in its class's channel."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 3, SIZE, SIZE)) * 0.2).astype(np.float32)
    heat = np.zeros((n, CLASSES, SIZE // 8, SIZE // 8), np.float32)
    for i in range(n):
        cls = int(rng.integers(CLASSES))
        h, w = rng.integers(12, 33, size=2)
        top, left = int(rng.integers(0, SIZE - h)), int(rng.integers(0, SIZE - w))
        x[i, cls, top:top + h, left:left + w] = 0.8 + 0.2 * rng.random((h, w))
        heat[i, cls, (top + h // 2) // 8, (left + w // 2) // 8] = 1.0
    return {"x": x, "heat": heat}


def calibrated(net, x: np.ndarray):
    """``net`` with every batch normalization's running statistics set to those of its own
    inputs on ``x`` (one eager pass, in order), as training would leave them: a fresh
    mindyolo network's initial statistics shrink its activations layer by layer until every
    input gives the same output."""
    import mindspore as ms
    from mindspore import nn

    def take(cell, inputs):
        data = inputs[0].asnumpy().astype(np.float64)
        cell.moving_mean.set_data(ms.Tensor(data.mean(axis=(0, 2, 3)), ms.float32))
        cell.moving_variance.set_data(ms.Tensor(data.var(axis=(0, 2, 3)), ms.float32))

    handles = [cell.register_forward_pre_hook(take) for _, cell in net.cells_and_names()
               if isinstance(cell, nn.BatchNorm2d)]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net.set_train(False)
    try:
        net(ms.Tensor(x))
    finally:
        for handle in handles:
            handle.remove()
    return net
