"""The openmmlab pack with the real stack (mmcv-lite 2.2, mmdet 3.3, mmdet3d 1.4, mmseg 1.2, NumPy 2).

Every scenario runs in a fresh interpreter. Each "works with lazypatch" check
has a twin showing the same code fails without it, so the pack stays
necessary. Fakes appear only for what these machines cannot have (an Ascend
stack, a compiled mmcv) and say so in the test name.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from lazypatch import installed_version

MMCV = installed_version("mmcv-lite") or installed_version("mmcv")


def test_activation_imports_no_target(interpreter):
    loaded = interpreter.run_json("""
        import sys, json
        import lazypatch.auto
        print(json.dumps(sorted(name for name in ("numpy", "torch", "mmcv", "mmdet", "mmdet3d",
                                                  "mmengine", "wrapt") if name in sys.modules)))
    """)
    assert loaded == []


def test_mmdet_mmdet3d_and_mmcv_ops_import_and_mmcv_version_stays_truthful(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json
        seen = {}

        @lazypatch.when_imported("mmdet.version")      # runs inside mmdet's __init__
        def look(module):
            import mmcv
            seen["during_mmdet"] = mmcv.__version__

        import mmdet, mmdet3d, mmcv, mmcv.ops
        import importlib.metadata as metadata
        try:
            metadata_mmcv = metadata.version("mmcv")
        except metadata.PackageNotFoundError:
            metadata_mmcv = None
        records = {record.name: record for record in lazypatch.report()}
        print(json.dumps({
            "versions": [mmcv.__version__, mmdet.__version__, mmdet3d.__version__],
            "seen": seen, "metadata": [metadata_mmcv, metadata.version("mmcv-lite")],
            "gate": {name: [records[name].status, records[name].notes]
                     for name in ("openmmlab.mmcv_version_gate.mmdet",
                                  "openmmlab.mmcv_version_gate.mmdet3d")},
            "ext": [records["openmmlab.mmcv_ext"].status,
                    mmcv._ext.__spec__.origin, hasattr(mmcv.ops, "nms_rotated")],
        }))
    """)
    assert result["versions"] == ["2.2.0", "3.3.0", "1.4.0"]   # the truth after the imports
    assert result["seen"] == {"during_mmdet": "2.1.0"}          # presented only meanwhile
    assert result["metadata"] == [None, "2.2.0"]                # metadata never lies
    for name, (status, notes) in result["gate"].items():
        assert status == "reverted", name
        assert "presented mmcv.__version__ = '2.1.0'" in notes[0] and "restored '2.2.0'" in notes[0]
    status, origin, has_ops = result["ext"]
    assert status == "applied" and "pure PyTorch" in origin and has_ops


@pytest.mark.parametrize("statement, error", [
    ("import mmdet", "AssertionError: MMCV==2.2.0 is used but incompatible"),
    ("import mmdet3d", "AssertionError: MMCV==2.2.0 is used but incompatible"),
    ("import mmseg", "AssertionError: MMCV==2.2.0 is used but incompatible"),
    ("import mmcv.ops", "No module named 'mmcv._ext'"),
])
def test_the_same_imports_fail_without_lazypatch(interpreter, statement, error):
    result = interpreter.run(statement, check=False)
    assert result.returncode != 0 and error in result.stderr


@pytest.mark.parametrize("disabled, statement, error", [
    ("openmmlab.mmcv_version_gate.mmdet", "import mmdet", "MMCV==2.2.0 is used but incompatible"),
    ("openmmlab.mmcv_version_gate.mmseg", "import mmseg", "MMCV==2.2.0 is used but incompatible"),
    ("openmmlab.mmcv_ext", "import mmcv.ops", "No module named 'mmcv._ext'"),
])
def test_each_patch_can_be_disabled(interpreter, disabled, statement, error):
    result = interpreter.run(f"import lazypatch.auto\n{statement}",
                             env={"LAZYPATCH_DISABLE": disabled}, check=False)
    assert result.returncode != 0 and error in result.stderr


@pytest.mark.parametrize("package, accepted, presented", [
    ("mmdet", ">=2.0.0rc4,<2.2.0", "2.1.0"),
    ("mmdet3d", ">=2.0.0rc4,<2.2.0", "2.1.0"),
    ("mmseg", ">=2.0.0rc4,<2.2.0", "2.1.0"),        # MMCV_MIN / MMCV_MAX, a chained compare
    ("mmpretrain", ">=2.0.0,<2.4.0", "2.3.0"),
    ("mmpose", ">=2.0.0rc4,<=3.0.0", "3.0.0"),      # its assert admits the maximum itself
])
def test_version_gate_reads_each_packages_range_from_its_source(package, accepted, presented):
    import importlib.util

    from lazypatch.registry.openmmlab.version_gate import accepted_range, version_inside
    origin = importlib.util.find_spec(package).origin
    with open(origin, encoding="utf-8") as handle:
        assert accepted_range(handle.read()) == accepted
    assert version_inside(accepted) == presented
    assert package not in sys.modules          # read, never executed


def test_version_gate_reads_the_bounds_of_an_older_family_member():
    from lazypatch.registry.openmmlab.version_gate import accepted_range, version_inside
    # mmdet 2.28's __init__, abridged: a range of mmcv 1.x, which an mmcv 2.2 must not be shown.
    source = textwrap.dedent("""
        import mmcv
        mmcv_minimum_version = '1.3.17'
        mmcv_maximum_version = '1.8.0'
        mmcv_version = digit_version(mmcv.__version__)
        assert (mmcv_version >= digit_version(mmcv_minimum_version)
                and mmcv_version <= digit_version(mmcv_maximum_version))
    """)
    assert accepted_range(source) == ">=1.3.17,<=1.8.0"
    assert version_inside(">=1.3.17,<=1.8.0") == "1.8.0"
    assert accepted_range("import mmcv\n__version__ = '1.0'\n") is None


def test_version_gate_leaves_another_major_range_to_the_package(interpreter):
    # A package (written by the test, the gate applied to it by name) whose __init__
    # wants mmcv 1.x, as mmdet 2.x and mmrotate 0.x do: no 1.x version is presented.
    interpreter.write({"oldmember/__init__.py": """
        import mmcv
        mmcv_minimum_version = '1.5.3'
        mmcv_maximum_version = '1.8.0'
        assert mmcv.__version__ < mmcv_maximum_version, f"MMCV=={mmcv.__version__} is incompatible"
    """})
    result = interpreter.run("""
        import lazypatch.auto, lazypatch, json
        from lazypatch.registry.openmmlab.version_gate import present_for_package

        @lazypatch.before_import("oldmember", name="test.old_member_gate")
        def old_member_gate(module, patch):
            present_for_package(module, patch)
        try:
            import oldmember
            outcome = "imported"
        except AssertionError as error:
            outcome = str(error)
        record = next(r for r in lazypatch.report() if r.name == "test.old_member_gate")
        print(json.dumps([outcome, record.status, record.reason]))
    """)
    outcome, status, reason = json.loads(result.stdout.splitlines()[-1])
    assert outcome == "MMCV==2.2.0 is incompatible"
    assert status == "skipped" and "another major version" in reason, reason


MMSEG_MODEL = """
    import json, torch, lazypatch
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules()
    model = MODELS.build(dict(
        type="EncoderDecoder",
        data_preprocessor=dict(type="SegDataPreProcessor", mean=[0, 0, 0], std=[1, 1, 1],
                               size=(32, 32)),
        backbone=dict(type="ResNetV1c", depth=18, num_stages=4, out_indices=(3,)),
        decode_head=dict(type="FCNHead", in_channels=512, in_index=0, channels=16, num_convs=1,
                         num_classes=3, loss_decode=dict(type="CrossEntropyLoss")),
        test_cfg=dict(mode="whole")))
    model.eval()
    with torch.no_grad():
        shape = tuple(model(torch.rand(1, 3, 32, 32), mode="tensor").shape)
    import mmcv
    record = next(r for r in lazypatch.report() if r.name == "openmmlab.mmcv_version_gate.mmseg")
    print(json.dumps([shape, mmcv.__version__, record.status, record.notes]))
"""


def test_mmsegmentation_imports_and_builds_a_model_under_lazypatch(interpreter):
    result = interpreter.run("import lazypatch.auto\n" + textwrap.dedent(MMSEG_MODEL), timeout=300)
    shape, version, status, notes = json.loads(result.stdout.splitlines()[-1])
    assert shape == [1, 3, 1, 1] and version == MMCV == "2.2.0"
    assert status == "reverted"
    assert notes == ["presented mmcv.__version__ = '2.1.0' to mmseg (installed mmcv-lite 2.2.0; "
                     "mmseg's __init__ asserts mmcv>=2.0.0rc4,<2.2.0); restored '2.2.0' after "
                     "its import"]


def test_mmsegmentation_model_fails_without_lazypatch(interpreter):
    result = interpreter.run(textwrap.dedent(MMSEG_MODEL), env={"LAZYPATCH": "0"}, check=False,
                             timeout=300)
    assert result.returncode != 0
    assert "MMCV==2.2.0 is used but incompatible" in result.stderr


def test_ext_is_undone_exactly_by_unpatch(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, sys
        import mmcv.ops, mmcv
        provided = sys.modules["mmcv._ext"]
        lazypatch.unpatch("openmmlab.mmcv_ext")
        print(json.dumps(["mmcv._ext" in sys.modules, hasattr(mmcv, "_ext"),
                          provided.nms.__name__]))
    """)
    assert result == [False, False, "nms"]


def test_fake_compiled_ext_wins_over_the_pure_pytorch_one(interpreter):
    # A compiled mmcv cannot be built here (35-40 min); a module named _ext in
    # a directory appended to mmcv.__path__ is found exactly as a compiled
    # mmcv/_ext*.so would be.
    interpreter.write({"fake_compiled/_ext.py": "COMPILED = True\n"})
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, os, sys
        import mmcv
        mmcv.__path__.append(os.path.join(os.getcwd(), "fake_compiled"))
        try:
            import mmcv.ops
        except Exception as error:      # the fake lacks the kernels' names
            failure = type(error).__name__
        record = next(r for r in lazypatch.report() if r.name == "openmmlab.mmcv_ext")
        print(json.dumps([record.status, record.reason,
                          getattr(sys.modules.get("mmcv._ext"), "COMPILED", False)]))
    """)
    status, reason, compiled_loaded = result
    assert status == "skipped" and "compiled mmcv._ext" in reason
    assert compiled_loaded


FAKE_ASCEND = {
    "torch_npu/__init__.py": "# fake: no Ascend NPU on this machine\n",
    "mx_driving/__init__.py": """
        # fake DrivingSDK: records which kernel mmcv reached
        import torch
        CALLS = []

        class MultiScaleDeformableAttnFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                        attention_weights):
                CALLS.append(("msda_forward", 5))
                ctx.save_for_backward(value)
                n, _, heads, dims = value.shape
                return value.new_zeros(n, sampling_locations.shape[1], heads * dims)

            @staticmethod
            def backward(ctx, grad_output):
                CALLS.append(("msda_backward", 1))
                value, = ctx.saved_tensors
                return torch.ones_like(value), None, None, None, None

        class DeformConv2dFunction: pass
        class ModulatedDeformConv2dFunction: pass
        def deform_conv2d(*args, **kwargs): CALLS.append(("deform_conv2d", len(args)))
        def modulated_deform_conv2d(*args, **kwargs): pass
        def voxelization(*args, **kwargs): CALLS.append(("voxelization", len(args)))
    """,
}


def test_fake_mx_driving_kernels_are_wired_into_mmcv_ops_and_undone(interpreter):
    interpreter.write(FAKE_ASCEND)
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, torch
        import mmcv.ops, mx_driving
        from mmcv.ops import multi_scale_deform_attn as msda_module
        Function = msda_module.MultiScaleDeformableAttnFunction
        value = torch.randn(1, 4, 2, 8, requires_grad=True)
        shapes = torch.tensor([[2, 2]]); starts = torch.tensor([0])
        locations = torch.rand(1, 3, 2, 1, 2, 2); weights = torch.rand(1, 3, 2, 1, 2)
        output = Function.apply(value, shapes, starts, locations, weights, 64)  # mmcv's call
        output.sum().backward()                     # 6 inputs need 6 gradients
        wired = {
            "deform": mmcv.ops.deform_conv.DeformConv2dFunction is mx_driving.DeformConv2dFunction,
            "deform_reexport": mmcv.ops.deform_conv2d is mx_driving.deform_conv2d,
            "modulated": mmcv.ops.modulated_deform_conv2d is mx_driving.modulated_deform_conv2d,
            "voxel": mmcv.ops.voxelize.voxelization is mx_driving.voxelization,
            "same_class": msda_module.MultiScaleDeformableAttnFunction is Function,
        }
        statuses = {r.name: r.status for r in lazypatch.report()
                    if r.name.startswith("openmmlab.mx_driving")}
        kernels = {name: getattr(mx_driving, name) for name in (
            "DeformConv2dFunction", "deform_conv2d", "modulated_deform_conv2d", "voxelization")}
        lazypatch.unpatch_all()
        restored = {
            "deform": mmcv.ops.deform_conv.DeformConv2dFunction.__module__,
            "deform_reexport": mmcv.ops.deform_conv2d is not kernels["deform_conv2d"],
            "voxel": mmcv.ops.voxelize.voxelization is not kernels["voxelization"],
            "msda_forward": "forward" in Function.__dict__ and
                Function.__dict__["forward"].__func__.__qualname__.startswith(
                    "MultiScaleDeformableAttnFunction."),
            # undo gives mmcv its kernels back and leaves mx_driving's own alone
            "mx_driving_untouched": all(getattr(mx_driving, name) is kernel
                                        for name, kernel in kernels.items()),
        }
        print(json.dumps({"calls": mx_driving.CALLS, "grad": float(value.grad.sum()),
                          "wired": wired, "statuses": statuses, "restored": restored}))
    """)
    assert result["calls"] == [["msda_forward", 5], ["msda_backward", 1]]
    assert result["grad"] == 64.0
    assert all(result["wired"].values()), result["wired"]
    assert set(result["statuses"].values()) == {"applied"}, result["statuses"]
    assert result["restored"] == {"deform": "mmcv.ops.deform_conv", "deform_reexport": True,
                                  "voxel": True, "msda_forward": True,
                                  "mx_driving_untouched": True}


def test_fake_mx_driving_without_torch_npu_is_not_used(interpreter):
    interpreter.write({"mx_driving/__init__.py": FAKE_ASCEND["mx_driving/__init__.py"]})
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, sys
        import mmcv.ops
        print(json.dumps([{r.name: [r.status, r.reason] for r in lazypatch.report()
                           if r.name.startswith("openmmlab.mx_driving")}, "mx_driving" in sys.modules]))
    """)
    records, imported = result
    assert not imported
    for status, reason in records.values():
        assert status == "skipped" and "torch_npu" in reason


ASSIGN_INSTANCES = textwrap.dedent("""
    import json
    import numpy as np
    from mmdet3d.evaluation.functional.scannet_utils.evaluate_semantic_instance import (
        assign_instances_for_scan, get_options)
    labels = ("chair", "table"); ids = (3, 5); id_to_label = {3: "chair", 5: "table"}
    gt_ids = np.array([3001] * 40 + [5001] * 30 + [0] * 10)   # two instances and void points
    prediction = {"p0": {"label_id": 3, "conf": 0.9,
                         "mask": np.array([1] * 40 + [0] * 40)}}
    options = get_options({"min_region_sizes": np.array([10])})
    gt2pred, pred2gt = assign_instances_for_scan(prediction, gt_ids, options, ids, labels,
                                                 id_to_label)
    print(json.dumps([len(gt2pred["chair"]), len(pred2gt["chair"]),
                      int(pred2gt["chair"][0]["matched_gt"][0]["intersection"])]))
""")

YTVIS_ACCUMULATE = textwrap.dedent("""
    import json
    import numpy as np
    from mmdet.evaluation.functional.ytviseval import YTVISeval
    evaluation = YTVISeval(iouType="bbox")
    params = evaluation.params
    params.vidIds, params.catIds = [1], [1]
    evaluation._paramsEval = params
    thresholds = len(params.iouThrs)
    entry = {"dtScores": [0.9, 0.4], "dtMatches": np.array([[1, 0]] * thresholds),
             "dtIgnore": np.zeros((thresholds, 2)), "gtIgnore": np.zeros(1)}
    evaluation.evalImgs = [entry] * (len(params.areaRng))
    evaluation.accumulate()
    print(json.dumps(float(evaluation.eval["recall"].max())))
""")


def test_legacy_numpy_calls_in_mmdet3d_and_mmdet_run_with_lazypatch(interpreter):
    # One interpreter for both: importing mmdet3d.evaluation costs seconds.
    result = interpreter.run("import lazypatch.auto\n" + ASSIGN_INSTANCES + YTVIS_ACCUMULATE)
    lines = result.stdout.splitlines()   # accumulate() prints progress lines too
    assignment = next(line for line in lines if line.startswith("["))
    assert json.loads(assignment) == [1, 1, 40] and json.loads(lines[-1]) == 1.0


def test_legacy_numpy_calls_in_mmdet3d_and_mmdet_fail_without_lazypatch(interpreter):
    # The packages must import first (the version gate alone), so only the
    # NumPy patches are off: the failure is the removed NumPy name.
    for code, name in ((ASSIGN_INSTANCES, "in1d"), (YTVIS_ACCUMULATE, "float")):
        result = interpreter.run("import lazypatch.auto\n" + code, check=False,
                                 env={"LAZYPATCH_DISABLE": "numpy_compat"})
        assert result.returncode != 0
        assert f"module 'numpy' has no attribute '{name}'" in result.stderr


# slow (about 22 s: two real Runner trainings and resumes): the --all tier (CI runs it), as
# test_checkpoint.py's real-runner test; test_checkpoint.py's other scenarios stay quick.
@pytest.mark.slow
def test_mmengine_resumes_its_checkpoints_under_torch_2_6_only_with_the_pack(interpreter):
    from packs.training.training_programs import MMENGINE_RUN
    interpreter.write({"tinyrun.py": MMENGINE_RUN})
    work = interpreter.root / "work"
    command = [sys.executable, "tinyrun.py", str(work), "iter"]
    interpreter.run_command(command + ["6"])
    without = interpreter.run_command(command + ["9", "resume"], env={"LAZYPATCH": "0"},
                                      check=False)
    assert without.returncode != 0 and "Weights only load failed" in without.stderr
    resumed = interpreter.run_command(command + ["9", "resume"])
    assert "TRAINING FINISHED at iteration 9" in resumed.stdout


def test_mmengine_checkpoint_patch_is_pinned_to_the_source_it_copied(interpreter):
    # Importing the pack registers its patches, which apply to the imported target
    # at once; the pin is about mmengine's own function, so read the original.
    result = interpreter.run_json("""
        import json, lazypatch
        import mmengine.runner.checkpoint as checkpoint
        from lazypatch.decide.pinning import source_sha256
        from lazypatch.registry.openmmlab.checkpoint import PINNED_LOAD_FROM_LOCAL
        original = lazypatch.original(checkpoint, "load_from_local")
        print(json.dumps([source_sha256(original) in PINNED_LOAD_FROM_LOCAL,
                          original.__module__, checkpoint.load_from_local.__module__]))
    """)
    assert result == [True, "mmengine.runner.checkpoint", "lazypatch.registry.openmmlab.checkpoint"]


POINTS_IN_BOXES = """
    import json, math, sys
    import lazypatch.auto
    import torch
    import mmcv.ops as ops

    def inside(point, box):          # plain-loop reference: bottom-centred box, yaw rz
        x, y, z, dx, dy, dz, rz = box
        px, py, pz = point
        if not z <= pz <= z + dz:
            return False
        cos, sin = math.cos(-rz), math.sin(-rz)
        local_x = (px - x) * cos - (py - y) * sin
        local_y = (px - x) * sin + (py - y) * cos
        return abs(local_x) < dx / 2 and abs(local_y) < dy / 2

    torch.manual_seed(0)
    points = torch.rand(2, 200, 3) * 10
    boxes = torch.cat([torch.rand(2, 5, 3) * 10, torch.rand(2, 5, 3) * 4 + 1,
                       torch.rand(2, 5, 1) * 3], dim=-1)
    try:
        every = ops.points_in_boxes_all(points, boxes).tolist()
        first = ops.points_in_boxes_part(points, boxes).tolist()
    except Exception as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        sys.exit(0)
    expected_every = [[[int(inside(p, b)) for b in boxes[i].tolist()] for p in points[i].tolist()]
                      for i in range(2)]
    expected_first = [[next((k for k, flag in enumerate(row) if flag), -1) for row in batch]
                      for batch in expected_every]
    print(json.dumps({"all": every == expected_every, "part": first == expected_first,
                      "some_inside": sum(map(sum, expected_every[0])) > 0}))
"""


def test_points_in_boxes_on_cpu_tensors_match_a_loop_reference_and_need_the_patch(interpreter):
    patched = interpreter.run_json(POINTS_IN_BOXES)
    assert patched == {"all": True, "part": True, "some_inside": True}
    unpatched = interpreter.run_json(POINTS_IN_BOXES,
                                     env={"LAZYPATCH_DISABLE": "openmmlab.points_in_boxes_cpu"})
    assert "error" in unpatched and "CUDA" in unpatched["error"]
