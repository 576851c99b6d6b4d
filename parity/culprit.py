"""The most specific explanation of a failed candidate: its inputs, its weights, or a cell."""
from __future__ import annotations

from typing import Optional

from amptool.documents.layers import LayerReport
from amptool.documents.parity import CandidateResult, Culprit
from amptool.precision.ranges import FP16_MAX


def pick_culprit(result: CandidateResult) -> Optional[Culprit]:
    """The most specific explanation of a failure: inputs, then weights, then a cell."""
    for finding in result.findings:
        if finding.kind == "preprocess":
            return Culprit(finding.kind, finding.where, finding.message, finding.fix)
    if result.weights is not None and result.weights.mismatched:
        first = result.weights.mismatched[0]
        return Culprit("weights", first.cell,
                       f"weight {first.name} of cell '{first.cell}' differs from the "
                       f"reference's ({first.mismatched}/{first.size} values)",
                       "re-export the candidate from the reference's checkpoint")
    layer = result.per_layer
    if layer is not None and layer.first_flagged:
        return _layer_culprit(layer, layer.first_flagged)
    return None


def _layer_culprit(layer: LayerReport, where: str) -> Culprit:
    origin = layer.origin
    row = next(r for r in layer.rows if r.path == where)
    if origin == "input":
        return Culprit("layer", where, "the network inputs already differ from the reference's",
                       "check the candidate's input preprocessing", origin)
    how = "born there" if origin == "born" else "inherited from its input"
    cos = row.cosine
    text = (f"first diverging cell '{where}' ({row.type}, computes in {row.dtype}; "
            f"cosine {cos:.4g}; {how})" if cos == cos else
            f"first diverging cell '{where}' ({row.type}, computes in {row.dtype}; "
            f"NaN/Inf in its output; {how})")
    if (row.ref_absmax or 0) > FP16_MAX:
        text += f"; its fp32 output reaches {row.ref_absmax:.4g}, beyond fp16's {FP16_MAX:g}"
    fix = (f"keep '{where}' in fp32: add it to the policy's fp32_cells" if origin == "born"
           else "look at the operations feeding it in its parent's construct")
    return Culprit("layer", where, text, fix, origin)
