"""Requirements by import name: ``mmcv`` means the importable package as well as a
distribution, whatever distribution provides it (mmcv-lite here), and a module
with no distribution at all is checked against its own ``__version__``."""

from __future__ import annotations

import json

import pytest

import lazypatch
from lazypatch.decide.distributions import import_name_providers, installed_version, providers_in
from lazypatch.decide.requirements import Requirement, find_version


@pytest.fixture(autouse=True)
def fresh_state():
    lazypatch.reset()
    yield
    lazypatch.reset()


@pytest.mark.stack
def test_mmcv_is_found_through_the_mmcv_lite_distribution():
    assert installed_version("mmcv") is None          # no distribution named mmcv here
    providers = import_name_providers("mmcv")
    assert [name.replace("_", "-").lower() for name, _ in providers] == ["mmcv-lite"]
    version, source = find_version("mmcv")
    assert version == installed_version("mmcv-lite") and source.startswith("distribution mmcv")
    assert Requirement("mmcv>=2.0,<2.3").unmet_reason() is None
    reason = Requirement("mmcv>=2.3").unmet_reason()
    assert reason is not None and "installed mmcv is 2.2.0 (distribution mmcv" in reason, reason


@pytest.mark.stack
def test_cv2_is_found_through_opencv_python_and_torch_local_version_matches():
    version, source = find_version("cv2")
    assert source.startswith("distribution opencv"), source
    assert version == installed_version("opencv-python")
    torch_version = installed_version("torch")
    assert Requirement("torch>=2.6").unmet_reason() is None, torch_version


@pytest.mark.stack
def test_a_requirement_on_a_distribution_name_still_reads_that_distribution():
    version, source = find_version("mmcv-lite")
    assert source == "distribution mmcv-lite" and version.startswith("2.2")


def write_distribution(site, distribution, version, import_name, top_level=True):
    info = site / f"{distribution}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    if top_level:
        (info / "top_level.txt").write_text(f"{import_name}\n")
    (info / "RECORD").write_text(
        f"{import_name}/__init__.py,,\n{distribution}-{version}.dist-info/METADATA,,\n../../bin/x,,\n")
    package = site / import_name
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")


def test_record_is_read_when_top_level_is_missing_and_the_cache_follows_the_mtime(tmp_path, monkeypatch):
    write_distribution(tmp_path, "acme_vision_headless", "1.4.0", "acmevision", top_level=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert providers_in(str(tmp_path)) == {"acmevision": [("acme_vision_headless", "1.4.0")]}
    write_distribution(tmp_path, "acme_vision", "1.5.0", "acmevision")
    # The new entry changed the directory's mtime, so the cached listing is read again.
    # Two distributions provide the name: the first by metadata entry name is used, and
    # the source says which one, and the other.
    version, source = find_version("acmevision")
    assert (version, source) == ("1.5.0", "distribution acme_vision, the first of the "
                                          "distributions providing acmevision (also "
                                          "acme_vision_headless 1.4.0)")


@pytest.mark.stack
def test_several_providers_and_the_module_version_end_to_end(interpreter):
    """In a fresh interpreter: a requirement on an import name applies the patch, its
    source is in the report's history; a vendored module with no distribution is
    checked against its own __version__ when it is being imported."""
    interpreter.write({"vendoredlib/__init__.py": "__version__ = '3.1.0+local'\nVALUE = 1\n"})
    result = interpreter.run("""
            import json, lazypatch

            @lazypatch.when_imported("vendoredlib", requires=["vendoredlib>=3,<4"])
            def fits(module):
                module.VALUE = 2

            @lazypatch.when_imported("vendoredlib", requires=["vendoredlib>=4"])
            def too_old(module):
                module.VALUE = 3

            @lazypatch.when_imported("mmcv", requires=["mmcv>=2.0,<2.3"])
            def quickstart(module):
                module.LAZYPATCH_SAW = True

            import vendoredlib, mmcv
            records = {record["name"].split(".")[-1]: record for record in lazypatch.report()}
            print(json.dumps({"value": vendoredlib.VALUE, "mmcv": getattr(mmcv, "LAZYPATCH_SAW", False),
                              "records": {name: [record["status"], record["reason"], record["history"]]
                                          for name, record in records.items()}}))
    """)
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output["value"] == 2 and output["mmcv"] is True, output
    fits, too_old, quickstart = (output["records"][name] for name in ("fits", "too_old", "quickstart"))
    assert fits[0] == "applied" and any("from vendoredlib.__version__" in event for event in fits[2])
    assert too_old[0] == "skipped"
    assert too_old[1] == ("requires vendoredlib>=4: installed vendoredlib is 3.1.0+local "
                          "(vendoredlib.__version__)")
    assert quickstart[0] == "applied"
    assert any("version of mmcv from distribution mmcv" in event for event in quickstart[2]), quickstart


@pytest.mark.stack
def test_doctor_says_which_source_gave_each_version(interpreter):
    import sys
    interpreter.write({
        "vendoredlib/__init__.py": "__version__ = '3.1.0'\n",
        "source_patches.py": """
            import lazypatch
            @lazypatch.when_imported("mmcv", name="demo.new_mmcv", requires=["mmcv>=2.3"])
            def new_mmcv(module):
                pass
            @lazypatch.when_imported("vendoredlib", name="demo.new_vendored",
                                     requires=["vendoredlib>=4"])
            def new_vendored(module):
                pass
        """,
    })
    result = interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "doctor", "--json", "--runs", "0",
         "--import", "vendoredlib"],
        env={"LAZYPATCH_MODULES": "source_patches",
             "LAZYPATCH_CACHE_DIR": str(interpreter.root / "cache")}, check=False)
    notes = "\n".join(json.loads(result.stdout)["notes"])
    # doctor groups unmet requirements per family of patches (one note for demo.*)
    assert "2 demo.* patches cannot apply on this host" in notes, notes
    assert "requires mmcv>=2.3: installed mmcv is 2.2.0 (distribution mmcv" in notes, notes
    assert ("requires vendoredlib>=4: installed vendoredlib is 3.1.0 "
            "(vendoredlib.__version__)" in notes), notes
