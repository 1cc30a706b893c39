"""The KV cache of rows decoded together, each its own prompt and reply, left-padded to one length: rows join
(their caches read apart, then joined) and leave (as they end) between steps. Greedy evaluation (`lm.greedy`) and
the served engine (`serving.engine`) decode on it.

A row's positions count its own tokens only, and its mask hides the padding, so a row decodes as it would alone.
The cache's layers keep spare columns: a step writes its column into them instead of copying the whole cache, as
`DynamicLayer.update` does by concatenation (a sixth of a CPU decoding step at 96 rows)."""

from __future__ import annotations

import functools
from typing import Any

SPARE_COLUMNS = 64  # cache columns held free beyond the rows' length; when they run out, 64 more (one copy)


def prompt_positions(mask: Any) -> Any:
    """Each token's position in its own row, from the left-padded attention mask (rows, length); padding 0."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def join(cache: Any, mask: Any, other: Any, other_mask: Any) -> Any:
    """`other`'s rows (a cache its own prefill returned, with its mask) added after `cache`'s rows, in `cache`;
    the shorter side is left-padded to the longer length. Returns the joined mask. `cache` None: `other` becomes
    the cache (its layers given spare columns) and `other_mask` is returned."""
    import torch

    if cache is None:
        other.layers = [_columns().holding(layer) for layer in other.layers]
        return other_mask
    length = max(mask.shape[1], other_mask.shape[1])
    for mine, theirs in zip(cache.layers, other.layers):
        _hold(
            mine,
            torch.cat([left_pad(mine.keys, length), left_pad(theirs.keys, length)]),
            torch.cat([left_pad(mine.values, length), left_pad(theirs.values, length)]),
        )
    return torch.cat([left_pad(mask, length, dim=1), left_pad(other_mask, length, dim=1)])


def keep(cache: Any, mask: Any, rows: list[int]) -> Any:
    """Only `rows` (indices, in order) stay in `cache`; the leading columns none of them reads are cut. Returns
    their mask."""
    import torch

    index = torch.tensor(rows, device=mask.device)
    mask = mask[index]
    first = int((mask.sum(0) > 0).nonzero()[0]) if mask.any() else 0
    for layer in cache.layers:
        _hold(layer, layer.keys[index, :, first:], layer.values[index, :, first:])
    return mask[:, first:]


def left_pad(t: Any, length: int, dim: int = 2) -> Any:
    """`t` with zeros before it along `dim` up to `length`."""
    import torch

    missing = length - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim)


def _hold(layer: Any, keys: Any, values: Any) -> None:
    if hasattr(layer, "hold"):
        layer.hold(keys, values)
    else:  # a layer of another kind (a sliding window) keeps its own update
        layer.keys, layer.values = keys, values


@functools.cache
def _columns() -> type:
    from transformers.cache_utils import DynamicLayer

    class Columns(DynamicLayer):
        """A `DynamicLayer` whose keys and values are views of buffers with `SPARE_COLUMNS` free columns."""

        @classmethod
        def holding(cls, layer: Any) -> Any:
            if type(layer) is not DynamicLayer or not layer.is_initialized:
                return layer
            held = cls()
            held.dtype, held.device, held.is_initialized = layer.keys.dtype, layer.keys.device, True
            held.hold(layer.keys, layer.values)
            return held

        def hold(self, keys: Any, values: Any) -> None:
            rows, heads, length, dim = keys.shape
            self._keys = keys.new_empty((rows, heads, length + SPARE_COLUMNS, dim))
            self._values = values.new_empty((rows, heads, length + SPARE_COLUMNS, values.shape[-1]))
            self._keys[:, :, :length], self._values[:, :, :length] = keys, values
            self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            length, new = self.keys.shape[2], key_states.shape[2]
            if length + new > self._keys.shape[2]:
                self.hold(self.keys, self.values)
            self._keys[:, :, length : length + new] = key_states
            self._values[:, :, length : length + new] = value_states
            self.keys, self.values = self._keys[:, :, : length + new], self._values[:, :, : length + new]
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            self.hold(self.keys[indices], self.values[indices])

    return Columns
