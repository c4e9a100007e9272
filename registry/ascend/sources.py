"""Guard for the few methods this pack must copy instead of wrapping.

A copied method body silently drifts from upstream: the DrivingSDK patcher's
ResNet forwards replace whatever the installed mmdet has with the text of
the version they were written against. Here each copied method is pinned to
the SHA-256 of ``inspect.getsource`` of the upstream method it was copied
from; a patch refuses to install its copy when the installed source differs
(a new mmdet version, or another patch already replaced the method), through
``lazypatch.source_drift``.
``tests/packs/test_ascend_*`` fails when the tested version's source changes.
The rewritten nuScenes ``output_to_nusc_box`` is pinned the same way: it
computes what the pinned upstream computes. (``PseudoSampler.sample`` needs no
pin: samplers.py derives its change from whatever source is installed.)
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Optional

import lazypatch

#: "Class.method" -> hashes of the upstream sources the copy is equivalent to.
#: Recorded from mmdet 3.3.0 (mmdet/models/backbones/resnet.py).
PINNED_SOURCES: Dict[str, FrozenSet[str]] = {
    "BasicBlock.forward": frozenset({
        "e4d81381d11d1d1bf323df4a4ecd85dc05938f72467c7d6414731ddd6b5c3b15",
    }),
    "Bottleneck.forward": frozenset({
        "8e53bcf5bdfc9ddaf1e9f49bfc9795c7d976a70e173eb5adfe96f94f7a8bbf5f",
    }),
    "ResNet.forward": frozenset({
        "3d2f14c8f0a1f6d7830f965f2447ef6c7b8551fb002af0f79d0eefa2686b823d",
    }),
    # Recorded from mmdet3d 1.4.0 (mmdet3d/evaluation/metrics/nuscenes_metric.py).
    "nuscenes_metric.output_to_nusc_box": frozenset({
        "09449001ce10377b901f1a417e6f689deec6b77f472421f90e380d8269e84ea9",
    }),
}

#: Key prefix of ``PINNED_SOURCES`` -> the upstream release the copy was made from.
COPIED_FROM = {"nuscenes_metric": "mmdet3d 1.4.0"}


def drift_reason(owner: Any, method: str) -> Optional[str]:
    """Why the copy of ``owner.method`` (a class's method, or a module's function)
    must not be installed, or None when it may."""
    owner_name = owner.__name__.rpartition(".")[2]
    return lazypatch.source_drift(owner, method, PINNED_SOURCES[f"{owner_name}.{method}"],
                                  copied_from=COPIED_FROM.get(owner_name, "mmdet 3.3.0"))
