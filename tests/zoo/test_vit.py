"""The zoo's checks (checks.py) on vit."""
# checks.py's slow mark and test functions, in its order (the order pytest runs them);
# `name as name` marks each as re-exported for pytest, not unused.
from .checks import (
    pytestmark as pytestmark,
    test_training_records_the_zoo_reference
        as test_training_records_the_zoo_reference,
    test_export_writes_mindir_and_onnx_in_both_precisions
        as test_export_writes_mindir_and_onnx_in_both_precisions,
    test_fp16_mindir_passes_or_the_report_says_why
        as test_fp16_mindir_passes_or_the_report_says_why,
    test_onnx_matches_the_fp32_mindir
        as test_onnx_matches_the_fp32_mindir,
    test_policy_auto_keeps_nothing_of_a_healthy_zoo_network
        as test_policy_auto_keeps_nothing_of_a_healthy_zoo_network,
)

NAMES = ["vit"]
