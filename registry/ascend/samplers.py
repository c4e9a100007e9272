"""mmdet's ``PseudoSampler.sample`` without ``Tensor.unique``.

Upstream takes ``torch.nonzero(mask).squeeze(-1).unique()``; ``nonzero`` already
returns each index once, in increasing order, so ``unique`` (a sort, which
Ascend runs on the host with a device synchronisation) returns its input
unchanged. The copy below drops it and changes nothing else; it is pinned to
mmdet 3.3.0's source by :mod:`.sources`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

import lazypatch

from .sources import drift_reason


def sample(self: Any, assign_result: Any, pred_instances: Any, gt_instances: Any,
           *args: Any, **kwargs: Any) -> Any:
    """mmdet 3.3.0's ``PseudoSampler.sample``, without the redundant ``unique``."""
    from mmdet.models.task_modules.samplers.sampling_result import SamplingResult
    gt_bboxes = gt_instances.bboxes
    priors = pred_instances.priors
    pos_inds = torch.nonzero(assign_result.gt_inds > 0, as_tuple=False).squeeze(-1)
    neg_inds = torch.nonzero(assign_result.gt_inds == 0, as_tuple=False).squeeze(-1)
    gt_flags = priors.new_zeros(priors.shape[0], dtype=torch.uint8)
    return SamplingResult(pos_inds=pos_inds, neg_inds=neg_inds, priors=priors,
                          gt_bboxes=gt_bboxes, assign_result=assign_result,
                          gt_flags=gt_flags, avg_factor_with_neg=False)


def patch_pseudo_sampler(pseudo_sampler: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Replace ``PseudoSampler.sample``, or skip when upstream's source differs."""
    owner = pseudo_sampler.PseudoSampler
    reason = drift_reason(owner, "sample")
    if reason is not None:
        patch.skip(reason)
    patch.setattr(owner, "sample", sample)
    patch.note("PseudoSampler.sample without Tensor.unique (copy pinned to mmdet 3.3.0)")
