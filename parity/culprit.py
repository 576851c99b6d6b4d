"""The most specific explanation of a failed candidate: its inputs, its weights, or a cell."""
from __future__ import annotations

from typing import Optional

from amptool.precision.ranges import FP16_MAX


def pick_culprit(result: dict) -> Optional[dict]:
    """The most specific explanation of a failure: inputs, then weights, then a cell."""
    for finding in result["findings"]:
        if finding["kind"] == "preprocess":
            return finding
    weights = result.get("weights") or {}
    if weights.get("mismatched"):
        first = weights["mismatched"][0]
        return {"kind": "weights", "where": first["cell"],
                "message": f"weight {first['name']} of cell '{first['cell']}' differs from the "
                           f"reference's ({first['mismatched']}/{first['size']} values)",
                "fix": "re-export the candidate from the reference's checkpoint"}
    layer = result.get("per_layer") or {}
    if layer.get("first_flagged"):
        return _layer_culprit(layer)
    return None


def _layer_culprit(layer: dict) -> dict:
    where, origin = layer["first_flagged"], layer["origin"]
    row = next(r for r in layer["rows"] if r["path"] == where)
    if origin == "input":
        return {"kind": "layer", "where": where, "origin": origin,
                "message": "the network inputs already differ from the reference's",
                "fix": "check the candidate's input preprocessing"}
    how = "born there" if origin == "born" else "inherited from its input"
    cos = row["cosine"]
    text = (f"first diverging cell '{where}' ({row['type']}, computes in {row['dtype']}; "
            f"cosine {cos:.4g}; {how})" if cos == cos else
            f"first diverging cell '{where}' ({row['type']}, computes in {row['dtype']}; "
            f"NaN/Inf in its output; {how})")
    if row.get("ref_absmax", 0) > FP16_MAX:
        text += f"; its fp32 output reaches {row['ref_absmax']:.4g}, beyond fp16's {FP16_MAX:g}"
    fix = (f"keep '{where}' in fp32: add it to the policy's fp32_cells" if origin == "born"
           else "look at the operations feeding it in its parent's construct")
    return {"kind": "layer", "where": where, "origin": origin, "message": text, "fix": fix}

