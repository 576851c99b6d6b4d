"""Sample losses: ``--loss amptool.samples.losses:NAME``, or a model for one's own."""
from __future__ import annotations

from mindspore import nn


class BoxAndClassLoss(nn.Cell):
    """The ``detector`` sample's loss: smooth-L1 between the predicted and true boxes
    (coordinates as fractions of the image side) plus cross-entropy of the class logits.

    It takes the network's two outputs, then the two targets it declares by name
    (``targets``: the arrays of the data source, here ``boxes``)."""

    targets = ("y_box", "y_cls")

    def __init__(self, box_weight: float = 5.0, beta: float = 0.05):
        super().__init__()
        self.box_weight = box_weight
        self.box_loss = nn.SmoothL1Loss(beta=beta, reduction="mean")
        self.class_loss = nn.CrossEntropyLoss()

    def construct(self, boxes, logits, y_box, y_cls):
        return self.box_weight * self.box_loss(boxes, y_box) + self.class_loss(logits, y_cls)
