"""Edited copies of transformers 4.x methods that torch.export cannot trace with
dynamic shapes, each pinned to the SHA-256 of the upstream source it was copied from
(``rewrite_class`` in this package's ``__init__`` declares where they go).

transformers is Apache-2.0; every copy below is upstream's code with the change its
class docstring names, and nothing else. Imported when the target module is.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch


def _is_empty_layer(entry: Any) -> bool:
    """Whether a DynamicCache layer holds nothing: the ``[]`` placeholder of a skipped
    layer, or a tensor without elements. ``len(tensor) == 0`` would ask for the batch
    size as a Python int, which makes torch.export specialise it to the example's."""
    if isinstance(entry, torch.Tensor):
        return entry.numel() == 0
    return len(entry) == 0


class DynamicCacheEmptyLayer:
    """the empty-layer test no longer calls len() on a tensor, which made the batch
    size a constant under torch.export"""

    _COPIED_FROM_ = "transformers 4.48.3 (the same source from 4.47.1 to 4.50.3)"
    _PINNED_ = {
        "update": frozenset({"bd7a5ed6db1eaeb03ab12987ed56cd586e7b4805676ea5ff0b00d51634c487b9"}),
        "get_seq_length": frozenset({
            "a25b29b171d8efcc5dada3df3e17319aa09380f077491bc7111729cefcf672b1"}),
    }

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: Optional[Dict[str, Any]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Updates the cache with the new `key_states` and `value_states` for the layer
        `layer_idx` and returns the layer's keys and values (transformers 4.48.3)."""
        # Update the number of seen tokens
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]

        # Update the cache
        if key_states is not None:
            if len(self.key_cache) <= layer_idx:
                # There may be skipped layers, fill them with empty lists
                for _ in range(len(self.key_cache), layer_idx):
                    self.key_cache.append([])
                    self.value_cache.append([])
                self.key_cache.append(key_states)
                self.value_cache.append(value_states)
            elif _is_empty_layer(self.key_cache[layer_idx]):   # EDITED: was len(...) == 0
                self.key_cache[layer_idx] = key_states
                self.value_cache[layer_idx] = value_states
            else:
                self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states],
                                                      dim=-2)
                self.value_cache[layer_idx] = torch.cat(
                    [self.value_cache[layer_idx], value_states], dim=-2)

        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    def get_seq_length(self, layer_idx: Optional[int] = 0) -> int:
        """Returns the sequence length of the cached states. A layer index can be
        optionally passed (transformers 4.48.3)."""
        is_empty_layer = (
            len(self.key_cache) == 0  # no cache in any layer
            or len(self.key_cache) <= layer_idx  # skipped `layer_idx`, no later layer ran
            or _is_empty_layer(self.key_cache[layer_idx])  # EDITED: was len(...) == 0
        )
        layer_seq_length = self.key_cache[layer_idx].shape[-2] if not is_empty_layer else 0
        return layer_seq_length
