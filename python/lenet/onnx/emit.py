"""The records several converters make (ops.py's and quantized.py's): a convolution,
a dense layer, a per-channel affine, from an ONNX node and its constants."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import ModelFileError
from .builder import Builder, Val, image, zero_pad
from .graph import Node, attr, ints

# --------------------------------------------------------------------- windows


def pads_of(b: Builder, n: Node, v: Val, kernel: tuple, strides: tuple, dilations: tuple) -> tuple[bool, tuple]:
    """(TensorFlow 'same', (top, bottom, left, right)) of a window node."""
    auto = attr(n, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if auto == "SAME_UPPER":
            return True, (0, 0, 0, 0)
        pads = []
        for size, k, s, d in zip(v.shape[1:], kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            pads.append((total - total // 2, total // 2))  # SAME_LOWER: the extra pixel before
        return False, (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    if auto not in ("NOTSET", "VALID"):
        b.fail(n, f"auto_pad '{auto}' is not supported")
    p = ints(attr(n, "pads", [0, 0, 0, 0])) if auto == "NOTSET" else [0, 0, 0, 0]
    if len(p) != 4 or min(p) < 0:
        raise ModelFileError(f"{b.g.where_node(n)}: pads {p} (4 non-negative values for an image)")
    return False, (p[0], p[2], p[1], p[3])


def window(b: Builder, n: Node, v: Val, kernel: Optional[tuple] = None) -> tuple:
    kernel = tuple(ints(attr(n, "kernel_shape", kernel)))
    if len(kernel) != 2:
        b.fail(n, f"kernel_shape {list(kernel)}: only 2-D windows are supported")
    strides = tuple(ints(attr(n, "strides", [1, 1])))
    dilations = tuple(ints(attr(n, "dilations", [1, 1])))
    same, pads = pads_of(b, n, v, kernel, strides, dilations)
    return kernel, strides, dilations, same, pads


def conv_of(b: Builder, n: Node, v: Val, w: np.ndarray, bias: Optional[np.ndarray], **fields: Any) -> Val:
    """A Conv node's record on v, its weights w (OIHW) and bias given (ConvInteger's are
    integers less their zero point)."""
    image(b, n, v)
    if w.ndim != 4:
        b.fail(n, f"weights of rank {w.ndim}: only 2-D convolutions are supported")
    kernel, strides, dilations, same, pads = window(b, n, v, w.shape[2:])
    weights = {"kernel": w.transpose(2, 3, 1, 0)}  # OIHW -> HWIO
    if bias is not None:
        weights["bias"] = bias.reshape(-1)
    x = zero_pad(b, n, v, pads)
    return b.emit(
        n,
        "conv2d",
        [x],
        b.need_shape(n, v),
        weights=weights,
        kernel=kernel,
        strides=strides,
        dilation=dilations,
        same_padding=same,
        filters=int(w.shape[0]),
        groups=int(attr(n, "group", 1)),
        use_bias=bias is not None,
        data_format="channels_first",
        **fields,
    )


# --------------------------------------------------------------------- dense


def dense_of(b: Builder, n: Node, v: Val, kernel: np.ndarray, bias: Optional[np.ndarray], **fields: Any) -> Val:
    if len(v.shape) != 1:
        b.fail(n, f"a matrix product on a value of shape {v.shape} per sample is not supported (a flat one is)")
    if kernel.ndim != 2 or kernel.shape[0] != v.shape[0]:
        raise ModelFileError(f"{b.g.where_node(n)}: weights of shape {kernel.shape} for {v.shape[0]} inputs")
    weights = {"kernel": kernel}
    if bias is not None:
        weights["bias"] = np.broadcast_to(bias.reshape(-1) if bias.size != 1 else bias.reshape(()), (kernel.shape[1],))
    return b.emit(
        n,
        "dense",
        [v],
        (kernel.shape[1],),
        v.batched,
        weights=weights,
        units=int(kernel.shape[1]),
        use_bias=bias is not None,
        **fields,
    )


# --------------------------------------------------------------------- per channel


def channels_of(v: Val) -> int:
    return v.shape[0] if len(v.shape) == 3 else v.shape[-1]


def per_channel(b: Builder, n: Node, v: Val, c: np.ndarray) -> Optional[np.ndarray]:
    """c as one value per channel of v (broadcast as ONNX does), None for one value in all."""
    c = np.asarray(c, dtype=np.float64)
    if c.size == 1:
        return None
    full = (1,) + tuple(v.shape) if v.batched else tuple(v.shape)
    try:
        bc = np.broadcast_to(c, np.broadcast_shapes(c.shape, full))
    except ValueError:
        raise ModelFileError(
            f"{b.g.where_node(n)}: a constant of shape {c.shape} does not broadcast to {full}"
        ) from None
    if bc.shape != full:
        b.fail(n, f"a constant of shape {c.shape} that widens {full} is not supported")
    axis = (1 if v.batched else 0) if len(v.shape) == 3 else len(full) - 1
    lead = [slice(None) if i == axis else 0 for i in range(len(full))]
    per = bc[tuple(lead)]
    if not np.array_equal(np.broadcast_to(per.reshape([-1 if i == axis else 1 for i in range(len(full))]), full), bc):
        b.fail(n, f"a constant of shape {c.shape} that varies within a channel is not supported")
    return per


def affine_of(b: Builder, n: Node, v: Val, scale: Any, shift: Any) -> Val:
    """y = x * scale + shift, one value in all (rescaling) or per channel (a batch norm
    with mean 0, variance 1 and epsilon 0: exactly x * gamma + beta)."""
    if np.ndim(scale) == 0 and np.ndim(shift) == 0:
        return b.emit(n, "rescaling", [v], v.shape, v.batched, scale=float(scale), offset=float(shift))
    ch = channels_of(v)
    gamma = np.broadcast_to(np.asarray(scale, np.float64), (ch,)).astype(np.float32)
    beta = np.broadcast_to(np.asarray(shift, np.float64), (ch,)).astype(np.float32)
    return b.emit(
        n,
        "batch_norm",
        [v],
        v.shape,
        v.batched,
        epsilon=0.0,
        axes=[1] if len(v.shape) == 3 else [-1],
        weights={
            "gamma": gamma,
            "beta": beta,
            "moving_mean": np.zeros(ch, np.float32),
            "moving_variance": np.ones(ch, np.float32),
        },
    )
