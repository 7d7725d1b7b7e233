"""Peak-memory estimate of a training step, checked against the machine before the first step.

A ViT's attention maps grow with the square of the tokens: 224 px images in patches of 4 give
3,137 tokens, and 4 heads x 3,137^2 maps per block at batch 256 need hundreds of GiB. TensorFlow
would try to allocate that and abort; `check_training_memory` refuses first, with the numbers
and the flags that would make the run fit.

The estimate counts, per example, the activations each transformer block keeps for the backward
pass (layer norms, q/k/v, attention logits and probabilities, MLP, residuals) and, once, the
parameters, their gradients and the optimizer's slots. It leaves out what XLA fuses away and a
hybrid ViT's ResNet stem, so it is a lower bound of the peak: a refused run would not have fit.

On a device mesh (`keras_vit.distribution`) the estimate is per device: each device holds the
batch / "batch"-axis examples, and 1 / "model"-axis of the weights, gradients, optimizer slots,
attention maps and MLP activations (the residual stream is whole on every device). A plan that
does not fit names the mesh of the same devices that would.

Example:

>>> blocks = [Block(tokens=3137, hidden_size=128, num_heads=4, mlp_dim=256)] * 6
>>> estimate = estimate_training_memory(blocks, params=800_000, batch_size=256, activation_bytes=4)
>>> f"{estimate.total / 2**30:.1f} GiB, attention maps {estimate.attention / 2**30:.1f} GiB"
'487.2 GiB, attention maps 450.5 GiB'
"""

from __future__ import annotations

import dataclasses

from keras_vit import machine

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Block:
    """Shape of one transformer block: tokens T, width D, heads, MLP width."""

    tokens: int
    hidden_size: int
    num_heads: int
    mlp_dim: int


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Bytes of one training step on one device."""

    activations: int  # everything kept per example for the backward pass, attention maps included
    attention: int  # of which attention logits and probabilities (B x heads x T x T per block)
    weights: int  # parameters, gradients and optimizer slots

    @property
    def total(self) -> int:
        return self.activations + self.weights


def estimate_training_memory(blocks, params, batch_size, activation_bytes=4, optimizer_slots=2,
                             model_shards=1) -> Estimate:
    """Estimates the memory of one training step at `batch_size` (per device).

    Args:
        blocks: list of `Block`. The model's transformer blocks.
        params: int. Number of parameters.
        batch_size: int. Examples per device and step.
        activation_bytes: int. Bytes per activation: 4 for float32, 2 for mixed precision.
            Defaults to 4.
        optimizer_slots: int. Per-parameter optimizer variables (2 for Adam/AdamW). Defaults to 2.
        model_shards: int. Devices on the mesh's "model" axis, over which weights, attention
            heads and MLP units are split. Defaults to 1.

    Example (ViT-e/14's weights and AdamW state, alone and split 8 ways):

    >>> e14 = [Block(257, 1792, 16, 15360)] * 56
    >>> [round(estimate_training_memory(e14, 3_805_000_000, 1, model_shards=m).weights / GIB, 1) for m in (1, 8)]
    [56.7, 7.1]
    """
    per_example = attention = 0
    for b in blocks:
        maps = 2 * b.num_heads * b.tokens * b.tokens // model_shards  # logits and softmax probabilities
        attention += maps
        # LayerNorms and residuals whole; q/k/v, attention context and the MLP's units split.
        per_example += maps + b.tokens * (9 * b.hidden_size + (3 * b.hidden_size + 2 * b.mlp_dim) // model_shards)
    return Estimate(
        activations=per_example * batch_size * activation_bytes,
        attention=attention * batch_size * activation_bytes,
        weights=-(-params // model_shards) * 4 * (2 + optimizer_slots),  # float32 weights, gradients, slots
    )


def _mesh_fixes(batch_axis, model_shards, global_batch, fits, blocks, params, activation_bytes, optimizer_slots, limit):
    """The smallest model axis of the same devices that fits this global batch, else the smallest
    that fits with a smaller batch (as flags)."""
    devices = batch_axis * model_shards
    meshes = [(devices // m, m) for m in range(1, devices + 1) if devices % m == 0]
    for b, m in meshes:
        if global_batch % b == 0 and fits(blocks, global_batch // b, m):
            return [] if (b, m) == (batch_axis, model_shards) else [f"--mesh {b}x{m} (--strategy model_parallel)"]
    for b, m in meshes:
        one = estimate_training_memory(blocks, params, 1, activation_bytes, optimizer_slots, m)
        per_device = (limit - one.weights) // max(one.activations, 1)
        if per_device >= 1:
            return [f"--mesh {b}x{m} --batch-size {per_device * b} (--strategy model_parallel)"]
    return []


def shared_memory(available, devices):
    """(bytes, what) of `available` memory for one of `devices` host devices sharing it.

    JAX's host CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count) all live in the
    machine's one memory, so each may plan with its share.

    Example:

    >>> shared_memory((16 * GIB, "MemAvailable"), 8)
    (2147483648, 'MemAvailable shared by 8 host devices')
    """
    limit, where = available
    if limit is None or devices <= 1:
        return available
    return limit // devices, f"{where} shared by {devices} host devices"


def check_training_memory(blocks, params, batch_size, image_size, patch_size, activation_bytes=4,
                          available=None, optimizer_slots=2, mesh=None) -> Estimate:
    """Raises ValueError, with the numbers and flags that would fit, when a step cannot fit.

    Args:
        blocks: list of `Block`.
        params: int. Number of parameters.
        batch_size: int. Examples per device and step.
        image_size: int. Input side in pixels (for the suggested --image-size).
        patch_size: int or None. Patch side (for the suggested --patch-size); None suggests none.
        activation_bytes: int. 4 for float32, 2 for mixed precision. Defaults to 4.
        available: (int, str) or None. Bytes available and where the figure comes from;
            None reads `keras_vit.machine.detect().memory`. Defaults to None.
        optimizer_slots: int. Defaults to 2.
        mesh: (int, int) or None. (batch, model) sizes of the device mesh; `batch_size` and
            `available` are then per device. None is one device. Defaults to None.

    Returns:
        The `Estimate`, when the step fits (or no memory figure is known).

    Example (the issue's run: 224 px, patch 4, batch 256, against 16 GiB):

    >>> blocks = [Block(3137, 128, 4, 256)] * 6
    >>> check_training_memory(blocks, 800_000, 256, 224, 4, available=(16 * GIB, "test"))
    Traceback (most recent call last):
    ...
    ValueError: A training step needs about 487.2 GiB ... exceeds the 16.0 GiB available (test). ... --batch-size 8 ...

    ViT-g/14 with AdamW at 4 images per device on 8 devices of 16 GiB: data parallel (8x1) cannot
    hold its 15 GiB of weights and optimizer state per device; a model axis of 2 can:

    >>> g14 = [Block(257, 1408, 16, 6144)] * 40
    >>> check_training_memory(g14, 1_011_000_000, 4, 224, 14, available=(16 * GIB, "test"), mesh=(8, 1))
    Traceback (most recent call last):
    ...
    ValueError: A training step needs about 20.8 GiB per device on mesh 8x1 ... Flags that would fit: --mesh 4x2 ...
    """
    batch_axis, model_shards = mesh if mesh is not None else (1, 1)
    estimate = estimate_training_memory(blocks, params, batch_size, activation_bytes, optimizer_slots, model_shards)
    limit, where = available if available is not None else machine.detect().memory
    if limit is None or estimate.total <= limit:
        return estimate

    def fits(new_blocks, batch, shards=model_shards):
        return estimate_training_memory(new_blocks, params, batch, activation_bytes, optimizer_slots, shards).total <= limit

    per_example = max(estimate.activations // batch_size, 1)
    fixes = []
    if mesh is not None:
        fixes.extend(_mesh_fixes(batch_axis, model_shards, batch_size * batch_axis, fits, blocks, params, activation_bytes,
                                 optimizer_slots, limit))
    max_batch = (limit - estimate.weights) // per_example
    if max_batch >= 1:
        fixes.append(f"--batch-size {max_batch * batch_axis}")
    if patch_size and blocks:
        prefix = blocks[0].tokens - (image_size // patch_size) ** 2

        def with_tokens(tokens):
            return [dataclasses.replace(b, tokens=tokens) for b in blocks]

        patches = [p for p in range(patch_size + 1, image_size + 1) if image_size % p == 0]
        patch = next((p for p in patches if fits(with_tokens((image_size // p) ** 2 + prefix), batch_size)), None)
        if patch is not None:
            fixes.append(f"--patch-size {patch}")
        sizes = [s for s in range(image_size - patch_size, 0, -patch_size)]
        size = next((s for s in sizes if fits(with_tokens((s // patch_size) ** 2 + prefix), batch_size)), None)
        if size is not None:
            fixes.append(f"--image-size {size}")
    tokens = blocks[0].tokens if blocks else 0
    heads = blocks[0].num_heads if blocks else 0
    on_mesh = f" per device on mesh {batch_axis}x{model_shards}" if mesh is not None else ""
    raise ValueError(
        f"A training step needs about {estimate.total / GIB:.1f} GiB{on_mesh} (activations {estimate.activations / GIB:.1f} GiB "
        f"at batch {batch_size}, of which attention maps {estimate.attention / GIB:.1f} GiB: {heads} heads x "
        f"{tokens:,} x {tokens:,} tokens x {len(blocks)} blocks; parameters, gradients and optimizer state "
        f"{estimate.weights / GIB:.2f} GiB), which exceeds the {limit / GIB:.1f} GiB available ({where}). "
        + (f"Flags that would fit: {' or '.join(fixes)}." if fixes else "No smaller batch fits: use a smaller model.")
    )
