"""The blocks of docs/driving_sdk.md's "On a machine without an NPU", complete and runnable:
`python examples/docs/npu_stand_in.py`.

Writes the page's `npu_script.py` to a temporary folder, runs it as the page does
(`lazypatch run --enable npu_stand_in --report report.json -- python npu_script.py`) on a
machine with neither torch_npu nor DrivingSDK, and asserts the output and the report rows
the page shows (timings aside).
"""

import json
import os
import subprocess
import sys
import tempfile
from importlib.util import find_spec

SCRIPT = '''\
import torch
import torch_npu
from mx_driving import bev_pool_v3

torch.npu.set_device(0)
q = torch.randn(1, 16, 4, 32).npu()          # (batch, sequence, heads, head_dim)
out = torch_npu.npu_fusion_attention(q, q, q, 4, "BSND", scale=32 ** -0.5)[0]
print("attention:", tuple(out.shape), out.device)
try:
    bev_pool_v3(q, q, q, q)
except NotImplementedError as error:
    print("raised:", str(error)[:73], "...")
'''

OUTPUT = [
    "attention: (1, 16, 4, 32) cpu",
    "raised: mx_driving.bev_pool_v3 has no kernel in lazypatch's NPU stand-in (pack 'n ...",
]

NOTES = {
    "npu_stand_in.torch_npu.pytorch": [
        "NPU calls go to 'cpu' (no NPU here); torch.npu, Tensor.npu and Module.npu set; "
        "pure-PyTorch torch_npu.npu_fusion_attention, torch_npu.npu_rms_norm, "
        "torch_npu.npu_rotary_mul",
        "mx_driving.bev_pool_v3: called 1 time(s) and raised (no kernel in the stand-in)"],
    "npu_stand_in.mx_driving_operators": [
        "pure-PyTorch mx_driving.multi_scale_deformable_attn, MultiScaleDeformableAttnFunction, "
        "npu_multi_scale_deformable_attn_function, deformable_aggregation, "
        "npu_deformable_aggregation, scatter_max, scatter_mean, scatter_add, npu_add_relu, "
        "npu_max_pool2d, npu_batch_matmul; 69 other DrivingSDK operators and mx_driving._C's "
        "kernels importable, raising when called"],
}


def main() -> None:
    assert find_spec("torch_npu") is None and find_spec("mx_driving") is None, \
        "this example is for a machine without torch_npu and DrivingSDK"
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "npu_script.py"), "w") as file:
            file.write(SCRIPT)
        environment = {key: value for key, value in os.environ.items()
                       if not key.startswith("LAZYPATCH")}
        completed = subprocess.run(
            [sys.executable, "-m", "lazypatch", "run", "--enable", "npu_stand_in", "--report",
             "report.json", "--", sys.executable, "npu_script.py"],
            cwd=folder, env=environment, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.splitlines() == OUTPUT, completed.stdout
        [report] = [name for name in os.listdir(folder) if name.startswith("report")]
        with open(os.path.join(folder, report)) as file:
            records = {record["name"]: record for record in json.load(file)["patches"]}
    for name, notes in NOTES.items():
        assert records[name]["status"] == "applied", records[name]
        assert records[name]["notes"] == notes, records[name]["notes"]
    print("ok: the page's output and report rows")


if __name__ == "__main__":
    main()
