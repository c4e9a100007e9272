"""The version gates of the OpenMMLab family on the 1.x stack: mmdet 2.x, mmdet3d
0.17-1.0.0rcN (its checks of mmcv, mmdet and mmseg) and mmseg 0.x accept the versions
they run with, decided by the bound the installed version crosses (the same major: the
same API generation), not by a fixed window.

The parsing and the decision are checked on the gates' own source text (as mmdet 2.24,
mmdet3d 1.0.0rc4 and 0.17.2 write them); a package written by the test runs the whole
gate in a fresh interpreter in any environment; the real 1.x packages run only in the
1.x stack (requirements/stack1x.txt) and skip elsewhere, saying so.
"""
from __future__ import annotations

import pytest
from packs.openmmlab.openmmlab1x import needs_stack_1x

from lazypatch import installed_version

#: mmdet3d 1.0.0rc4's __init__, abridged to its checks (mmdet3d 0.17.2 has the same
#: shape with mmcv<=1.4.0, mmdet>=2.14.0 and mmseg>=0.14.1).
MMDET3D_1_0_0RC4 = """
import mmcv
import mmdet
import mmseg
mmcv_minimum_version = '1.5.2'
mmcv_maximum_version = '1.7.0'
mmcv_version = digit_version(mmcv.__version__)
assert (mmcv_version >= digit_version(mmcv_minimum_version)
        and mmcv_version <= digit_version(mmcv_maximum_version))
mmdet_minimum_version = '2.24.0'
mmdet_maximum_version = '3.0.0'
mmdet_version = digit_version(mmdet.__version__)
assert (mmdet_version >= digit_version(mmdet_minimum_version)
        and mmdet_version <= digit_version(mmdet_maximum_version))
mmseg_minimum_version = '0.20.0'
mmseg_maximum_version = '1.0.0'
mmseg_version = digit_version(mmseg.__version__)
assert (mmseg_version >= digit_version(mmseg_minimum_version)
        and mmseg_version <= digit_version(mmseg_maximum_version))
"""

#: mmdet 2.24.0's check (BEVFormer's mmdet): an inclusive maximum below mmcv 1.7.
MMDET_2_24 = """
import mmcv
mmcv_minimum_version = '1.3.17'
mmcv_maximum_version = '1.6.0'
mmcv_version = digit_version(mmcv.__version__)
assert (mmcv_version >= digit_version(mmcv_minimum_version)
        and mmcv_version <= digit_version(mmcv_maximum_version))
"""


def test_each_dependency_range_is_read_from_the_source():
    from lazypatch.registry.openmmlab.version_gate import accepted_range
    assert accepted_range(MMDET3D_1_0_0RC4) == ">=1.5.2,<=1.7.0"
    assert accepted_range(MMDET3D_1_0_0RC4, "mmdet") == ">=2.24.0,<=3.0.0"
    assert accepted_range(MMDET3D_1_0_0RC4, "mmseg") == ">=0.20.0,<=1.0.0"
    assert accepted_range(MMDET_2_24) == ">=1.3.17,<=1.6.0"
    assert accepted_range(MMDET_2_24, "mmdet") is None     # mmdet asserts no mmdet range


@pytest.mark.parametrize("accepted, installed, presented", [
    (">=1.3.17,<=1.6.0", "1.7.2", "1.6.0"),      # mmdet 2.24 on mmcv 1.7.2: its inclusive maximum
    (">=1.5.2,<=1.7.0", "1.7.2", "1.7.0"),       # mmdet3d 1.0.0rc4
    (">=1.3.8,<=1.4.0", "1.7.2", "1.4.0"),       # mmdet3d 0.17.2, mmdet 2.14, mmseg 0.14
    (">=2.24.0,<=3.0.0", "2.14.0", "2.24.0"),    # mmdet3d 1.0.0rc4's minimum on mmdet
    (">=0.20.0,<=1.0.0", "0.14.1", "0.20.0"),    # ... and on mmseg
    (">=2.0.0rc4,<2.2.0", "2.2.0", "2.1.0"),     # the 2.x stack, as before
])
def test_the_accepted_version_nearest_to_the_installed_one(accepted, installed, presented):
    from lazypatch.registry.openmmlab.version_gate import nearest_accepted
    assert nearest_accepted(accepted, installed) == (presented, "")


@pytest.mark.parametrize("accepted, installed", [
    (">=1.3.17,<1.8.0", "2.2.0"),        # mmdet 2.x on mmcv 2.2: another API generation
    (">=2.0.0rc4,<2.2.0", "1.7.2"),      # mmdet 3.x on mmcv 1.7
    (">=2.24.0,<=3.0.0", "3.3.0"),       # mmdet3d 1.0.0rc4 on mmdet 3.3
])
def test_another_major_version_is_left_to_the_package(accepted, installed):
    from lazypatch.registry.openmmlab.version_gate import nearest_accepted
    presented, why_not = nearest_accepted(accepted, installed)
    assert presented is None and why_not == "another major version"


def _next_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def test_a_package_asserting_a_newer_mmdet_of_the_same_major_imports(interpreter):
    # Written by the test, in the shape of mmdet3d's checks: it asks for an mmdet one
    # minor release newer than the installed one (and the installed mmcv's own range).
    mmdet = installed_version("mmdet")
    mmcv = installed_version("mmcv") or installed_version("mmcv-lite")
    if mmdet is None or mmcv is None:
        pytest.skip("needs mmdet and mmcv installed (requirements/stack.txt or stack1x.txt)")
    wanted = _next_minor(mmdet)
    interpreter.write({"needs_newer_mmdet/__init__.py": f"""
        import mmcv
        import mmdet
        mmcv_minimum_version = '{mmcv}'
        mmcv_maximum_version = '{mmcv}'
        mmdet_minimum_version = '{wanted}'
        mmdet_maximum_version = '{int(wanted.split('.')[0]) + 1}.0.0'
        assert mmcv.__version__ <= mmcv_maximum_version
        assert mmdet.__version__ >= mmdet_minimum_version, \\
            f"MMDET=={{mmdet.__version__}} is used but incompatible"
        SEEN = mmdet.__version__
    """})
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json
        from lazypatch.registry.openmmlab.version_gate import present_for_package

        @lazypatch.before_import("needs_newer_mmdet", name="test.gate")
        def gate(module, patch):
            present_for_package(module, patch)

        import needs_newer_mmdet, mmdet
        record = next(r for r in lazypatch.report() if r.name == "test.gate")
        print(json.dumps([needs_newer_mmdet.SEEN, mmdet.__version__, record.status, record.notes]))
    """)
    seen, after, status, notes = result
    assert (seen, after, status) == (wanted, mmdet, "reverted")
    assert notes[0].startswith(f"presented mmdet.__version__ = '{wanted}' to needs_newer_mmdet")
    assert any(f"is accepted by needs_newer_mmdet (mmcv>={mmcv},<={mmcv})" in note
               for note in notes), notes


# --- the real 1.x packages ---------------------------------------------------------

@needs_stack_1x
def test_mmdet3d_refuses_mmcv_1_7_2_without_lazypatch(interpreter):
    result = interpreter.run("import mmdet3d", check=False)
    assert result.returncode != 0
    assert "MMCV==1.7.2 is used but incompatible. Please install mmcv>=1.5.2, <=1.7.0" \
        in result.stderr


@needs_stack_1x
def test_mmdet3d_mmdet_and_mmseg_import_and_versions_stay_truthful(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json
        import importlib.metadata as metadata
        import mmdet3d, mmdet, mmseg, mmcv
        records = {r.name: r for r in lazypatch.report()}
        print(json.dumps({
            "versions": [mmcv.__version__, mmdet.__version__, mmseg.__version__],
            "metadata": metadata.version("mmcv"),
            "gates": {name: [records[name].status, records[name].notes] for name in
                      ("openmmlab.mmcv_version_gate.mmdet3d", "openmmlab.mmcv_version_gate.mmdet",
                       "openmmlab.mmcv_version_gate.mmseg")}}))
    """)
    assert result["versions"] == ["1.7.2", "2.28.2", "0.30.0"] and result["metadata"] == "1.7.2"
    status, notes = result["gates"]["openmmlab.mmcv_version_gate.mmdet3d"]
    assert status == "reverted"
    assert notes[0] == ("presented mmcv.__version__ = '1.7.0' to mmdet3d (installed mmcv 1.7.2; "
                        "mmdet3d's __init__ asserts mmcv>=1.5.2,<=1.7.0); restored '1.7.2' after "
                        "its import")
    assert "mmdet 2.28.2 is accepted by mmdet3d (mmdet>=2.24.0,<=3.0.0); nothing to present" in notes
    # mmdet 2.28 and mmseg 0.30 accept mmcv 1.7.2 as it is: their gates say so.
    for name in ("openmmlab.mmcv_version_gate.mmdet", "openmmlab.mmcv_version_gate.mmseg"):
        assert result["gates"][name][0] == "skipped"


@needs_stack_1x
def test_mmdet_2_24s_own_check_on_mmcv_1_7_2(interpreter):
    # mmdet 2.24's __init__ (BEVFormer's mmdet) is not installed beside 2.28: its check is
    # written as a package of the family, gated the way the pack gates mmdet.
    interpreter.write({"mmdet224/__init__.py": "from mmcv import digit_version\n" + MMDET_2_24
                       + "SEEN = mmcv.__version__\n"})
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json
        from lazypatch.registry.openmmlab.version_gate import present_for_package

        @lazypatch.before_import("mmdet224", name="test.gate")
        def gate(module, patch):
            present_for_package(module, patch)

        import mmdet224, mmcv
        print(json.dumps([mmdet224.SEEN, mmcv.__version__]))
    """)
    assert result == ["1.6.0", "1.7.2"]
